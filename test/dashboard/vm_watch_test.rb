# frozen_string_literal: true

require "test_helper"
require "json"
require "logger"
require "ostruct"
require "securerandom"
require "rack/mock"
require "strata/dashboard"
require "strata/vm_watch"

# The VM watch's reports in data.json: a request through Strata::VMWatch (debug mode) that
# invalidates, then the dashboard's data as a page in the same process reads it.
class DashboardVMWatchTest < Minitest::Test
  include Strata::TestSupport

  TOKEN = "vm-watch-test-#{SecureRandom.hex(16)}"
  # OpenStruct.new gives its object a singleton class, which Ruby 3.1 counts (class_serial).
  # Ruby 3.2+ counts no class creation, so there the plant is an extend (global_cvar_state).
  PLANTED_AT = "#{__FILE__}:#{__LINE__ + 1}"
  PLANT = RubyVM.stat.key?(:class_serial) ? -> { OpenStruct.new(a: 1) } : -> { Object.new.extend(Comparable) }

  APP = lambda do |env|
    PLANT.call if env["PATH_INFO"].start_with?("/plant")
    [200, {"content-type" => "text/plain"}, ["ok"]]
  end

  def setup
    @dir = private_tmpdir
    @l1_path = File.join(@dir, "app.l1")
    @table = Strata::Tiers::SharedMemory.new(path: @l1_path, size: 4 << 20)
  end

  def teardown
    Strata::VMWatch.ring.clear
    @table&.close
    FileUtils.remove_entry(@dir) if @dir && File.exist?(@dir)
  end

  def test_data_json_carries_the_reports_of_the_process_ring_newest_first
    Strata::VMWatch.ring.clear
    watch = Rack::MockRequest.new(Strata::VMWatch.new(APP, debug: true, logger: Logger.new(nil)))
    watch.get("/plant")
    watch.get("/clean")
    watch.get("/plant/#{"x" * 100}")
    app = Rack::MockRequest.new(Strata::Dashboard.new(config: {l1: {path: @l1_path}}, token: TOKEN))

    response = app.get("/data.json", "HTTP_AUTHORIZATION" => "Bearer #{TOKEN}")
    refused = app.get("/data.json")

    assert_equal 200, response.status
    reports = JSON.parse(response.body).fetch("vm_watch").fetch("reports")
    assert_equal ["GET /plant/#{"x" * 53}", "GET /plant"], reports.map { |report| report["label"] }
    report = reports.fetch(1)
    assert_equal Strata::VMWatch.ring.to_a.fetch(0).deltas.transform_keys(&:to_s), report["deltas"]
    refute_empty report["deltas"]
    assert_equal [PLANTED_AT], report["sites"]
    assert_match(/\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\z/, report["time"])
    assert_equal 401, refused.status
    refute_includes refused.body, "plant"
  end

  def test_without_a_ring_data_json_says_none_can_be_seen
    Strata::VMWatch.new(APP, logger: Logger.new(nil)).call(env("/plant"))
    app = Strata::Dashboard.new(config: {l1: {path: @l1_path}}, token: TOKEN, vm_watch: nil)

    _, _, body = app.call(env("/data.json", "HTTP_AUTHORIZATION" => "Bearer #{TOKEN}"))

    assert_nil JSON.parse(body.join).fetch("vm_watch")
  end

  def test_a_long_location_keeps_its_end_where_the_file_and_line_are
    location = "/srv/app/#{"releases/" * 10}app/controllers/plants_controller.rb:12"

    assert_equal "…#{location.byteslice(-64, 64)}", Strata::Dashboard::VMReports.tail(location)
    assert Strata::Dashboard::VMReports.tail(location).end_with?("plants_controller.rb:12")
  end

  private

  def env(path, extra = {})
    {"REQUEST_METHOD" => "GET", "SCRIPT_NAME" => "", "PATH_INFO" => path, "QUERY_STRING" => "",
     "rack.url_scheme" => "http"}.merge(extra)
  end
end
