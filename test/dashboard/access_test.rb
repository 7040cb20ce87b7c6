# frozen_string_literal: true

require "test_helper"
require "json"
require "securerandom"
require "strata/dashboard"

# Strata::Dashboard as a Rack app, called with Rack envs: who is let in, the cookie a ?token=
# sets, the paths under a mount point. The tiers behind it are one real L1 file.
class DashboardAccessTest < Minitest::Test
  include Strata::TestSupport

  TOKEN = "access-test-#{SecureRandom.hex(16)}"

  def setup
    @dir = private_tmpdir
    @l1_path = File.join(@dir, "app.l1")
    @table = Strata::Tiers::SharedMemory.new(path: @l1_path, size: 4 << 20)
    @table.set("secret/key", "value")
  end

  def teardown
    @table&.close
    FileUtils.remove_entry(@dir) if @dir && File.exist?(@dir)
  end

  def test_without_a_token_or_authorize_every_request_is_refused
    app = dashboard

    responses = ["/", "/data.json", "/dashboard.js"].map { |path| app.call(env(path)) }

    assert_equal [403] * 3, responses.map(&:first)
    responses.each { |(_, headers, body)| assert_equal ["Strata dashboard: no token configured.\n", "text/plain; charset=utf-8"], [body.join, headers["content-type"]] }
  end

  def test_a_bearer_token_is_let_in_and_a_wrong_or_missing_one_refused
    app = dashboard(token: TOKEN)

    good = app.call(env("/data.json", "HTTP_AUTHORIZATION" => "Bearer #{TOKEN}"))
    wrong = app.call(env("/data.json", "HTTP_AUTHORIZATION" => "Bearer #{TOKEN}x"))
    missing = app.call(env("/data.json"))

    assert_equal [200, 401, 401], [good, wrong, missing].map(&:first)
    assert_equal 1, JSON.parse(good[2].join)["stats"]["l1"]["entries"]
    [wrong, missing].each { |(_, _, body)| refute_includes body.join, "secret" }
  end

  # A browser asks for credentials after a 401 with WWW-Authenticate; the token is the password.
  def test_a_refusal_asks_for_basic_credentials_and_the_token_as_password_is_let_in
    app = dashboard(token: TOKEN)

    status, headers, = app.call(env("/"))
    basic = ->(password) { app.call(env("/data.json", "HTTP_AUTHORIZATION" => "Basic #{["admin:#{password}"].pack("m0")}")) }

    assert_equal 401, status
    assert_equal %(Basic realm="Strata dashboard", charset="UTF-8"), headers["www-authenticate"]
    assert_equal [200, 401], [basic.call(TOKEN).first, basic.call("#{TOKEN}x").first]
    assert_equal 401, app.call(env("/data.json", "HTTP_AUTHORIZATION" => "Basic !!!")).first
  end

  def test_a_query_token_sets_an_http_only_strict_cookie_that_lets_later_requests_in
    app = dashboard(token: TOKEN)

    status, headers, = app.call(env("/", "QUERY_STRING" => "token=#{TOKEN}", "SCRIPT_NAME" => "/strata"))
    cookie = headers["set-cookie"]
    value = cookie[/\Astrata_dashboard=([0-9a-f]+);/, 1]
    later = app.call(env("/data.json", "HTTP_COOKIE" => "other=1; strata_dashboard=#{value}"))
    forged = app.call(env("/data.json", "HTTP_COOKIE" => "strata_dashboard=#{value.reverse}"))

    assert_equal 200, status
    assert_equal "strata_dashboard=#{value}; Path=/strata; HttpOnly; SameSite=Strict", cookie
    refute_includes cookie, TOKEN
    assert_equal [200, 401], [later.first, forged.first]
  end

  def test_the_cookie_is_secure_over_https
    _, headers, = dashboard(token: TOKEN).call(env("/", "QUERY_STRING" => "token=#{TOKEN}", "rack.url_scheme" => "https"))

    assert_match(/; SameSite=Strict; Secure\z/, headers["set-cookie"])
  end

  def test_the_apps_authorize_callable_decides_and_is_given_the_env
    seen = []
    app = dashboard(authorize: lambda { |env|
      seen << env["PATH_INFO"]
      env["HTTP_X_ADMIN"] == "yes"
    })

    allowed = app.call(env("/data.json", "HTTP_X_ADMIN" => "yes"))
    refused = app.call(env("/data.json"))

    assert_equal [200, 403], [allowed.first, refused.first]
    assert_equal "Strata dashboard: the application's authorization refused this request.\n", refused[2].join
    assert_equal ["/data.json"] * 2, seen

    both = dashboard(token: TOKEN, authorize: ->(_env) { false }).call(env("/data.json"))
    assert_equal 401, both.first
    assert_match(/\AStrata dashboard: the application's authorization refused this request, and a valid token is needed/, both[2].join)
  end

  def test_mounted_under_a_path_the_page_links_its_assets_there
    app = dashboard(authorize: ->(_env) { true })

    _, _, page = app.call(env("", "SCRIPT_NAME" => "/admin/strata"))
    script = app.call(env("/dashboard.js", "SCRIPT_NAME" => "/admin/strata"))
    missing = app.call(env("/other", "SCRIPT_NAME" => "/admin/strata"))

    assert_includes page.join, %(<script src="/admin/strata/dashboard.js" defer>)
    assert_includes page.join, %(<body data-base="/admin/strata">)
    assert_equal [200, "text/javascript; charset=utf-8"], [script[0], script[1]["content-type"]]
    assert_equal 404, missing.first
  end

  def test_only_get_is_served
    status, = dashboard(token: TOKEN).call(env("/data.json", "REQUEST_METHOD" => "POST", "HTTP_AUTHORIZATION" => "Bearer #{TOKEN}"))

    assert_equal 405, status
  end

  def test_a_short_token_or_an_authorize_that_is_not_callable_is_refused
    assert_raises(ArgumentError) { dashboard(token: "short") }
    assert_raises(ArgumentError) { dashboard(authorize: true) }
  end

  private

  def dashboard(**options)
    Strata::Dashboard.new(config: {l1: {path: @l1_path}}, **options)
  end

  def env(path, extra = {})
    {"REQUEST_METHOD" => "GET", "SCRIPT_NAME" => "", "PATH_INFO" => path, "QUERY_STRING" => "",
     "rack.url_scheme" => "http"}.merge(extra)
  end
end
