# frozen_string_literal: true

require "test_helper"
require "json"
require "securerandom"
require "action_dispatch"
require "rack/mock"
require "strata/dashboard"

# The dashboard mounted in an Action Dispatch route set, as an app's config/routes.rb mounts it:
# its page, script and data answer under the mount path, and the token's cookie is scoped to it.
class DashboardRailsMountTest < Minitest::Test
  include Strata::TestSupport

  TOKEN = "mount-test-#{SecureRandom.hex(16)}"

  def setup
    @dir = private_tmpdir
    @l1_path = File.join(@dir, "app.l1")
    @table = Strata::Tiers::SharedMemory.new(path: @l1_path, size: 4 << 20)
    @table.set("k", "v")
    dashboard = Strata::Dashboard.new(config: {l1: {path: @l1_path}}, token: TOKEN)
    @routes = ActionDispatch::Routing::RouteSet.new
    @routes.draw { mount dashboard => "/admin/strata" }
  end

  def teardown
    @table&.close
    FileUtils.remove_entry(@dir) if @dir && File.exist?(@dir)
  end

  def test_the_page_its_script_and_data_answer_under_the_mount_path
    page = get("/admin/strata?token=#{TOKEN}")
    cookie = page["set-cookie"][/\Astrata_dashboard=[0-9a-f]+/]
    script = get("/admin/strata/dashboard.js", "HTTP_COOKIE" => cookie)
    data = get("/admin/strata/data.json", "HTTP_COOKIE" => cookie)
    refused = get("/admin/strata/data.json")

    assert_equal 200, page.status
    assert_includes page.body, %(<script src="/admin/strata/dashboard.js" defer>)
    assert_includes page["set-cookie"], "Path=/admin/strata; HttpOnly; SameSite=Strict"
    assert_equal [200, 200, 401], [script.status, data.status, refused.status]
    assert_equal 1, JSON.parse(data.body)["stats"]["l1"]["entries"]
  end

  private

  def get(path, env = {})
    Rack::MockRequest.new(@routes).get(path, env)
  end
end
