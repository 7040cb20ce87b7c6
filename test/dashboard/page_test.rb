# frozen_string_literal: true

require "test_helper"
require "json"
require "logger"
require "net/http"
require "open3"
require "ostruct"
require "rbconfig"
require "securerandom"
require "yaml"
require "active_support"
require "active_support/cache/strata_store"
require "strata/dashboard"
require "support/chromium"
require "support/memcached_process"

# The page in a real headless Chromium (test/support/chromium.rb), served by Dashboard::Server
# in a thread over a real L1 table and a memcached server of the test's own (another test's
# writes would move the figures it compares), which a store used with known traffic: the page
# loads, its charts draw (from the history the dashboard keeps in the L1 table), its
# numbers are `strata stats --json`'s, and without the token nothing but the refusal is served.
class DashboardPageTest < Minitest::Test
  include Strata::TestSupport

  ROOT = File.expand_path("../..", __dir__)
  EXE = File.join(ROOT, "exe", "strata")
  TABLE_SIZE = 4 << 20
  TOKEN = "page-test-#{SecureRandom.hex(16)}"
  # A request that invalidates the VM caches (as in test/vm_watch/middleware_test.rb).
  PLANT = RubyVM.stat.key?(:class_serial) ? -> { OpenStruct.new(a: 1) } : -> { Object.new.extend(Comparable) }

  def setup
    @dir = private_tmpdir
    @l1_path = File.join(@dir, "app.l1")
    @memcached = MemcachedProcess.new.start
    @options = {l1: {path: @l1_path, size: TABLE_SIZE}, memcached: {servers: [@memcached.server]}}
    @config = File.join(@dir, "strata.yml")
    File.write(@config, YAML.dump(JSON.parse(JSON.generate(@options))))
    # L1 over memcached without a poller keeps an entry at most coherence_interval: a long one,
    # so that none lapses between the page's figures and strata stats'.
    @store = ActiveSupport::Cache::StrataStore.new(namespace: "page-#{SecureRandom.hex(4)}", coherence_interval: 600, **@options)
    @sampler = Strata::Dashboard::Sampler.new(table: @store.stack[:l1], store_name: @store.class.name, every: 1)
    @sampler.subscribe
    # interval: 0, a snapshot (and a point of the series) per data.json request.
    @ring = Strata::VMWatch::Ring.new
    @app = Strata::Dashboard.new(config: @config, token: TOKEN, interval: 0, vm_watch: @ring)
    @server = Strata::Dashboard::Server.new(@app, port: 0)
    @thread = Thread.new { @server.run }
  end

  def teardown
    @server&.stop
    @thread&.join
    @sampler&.stop
    @store&.close
    @memcached&.kill
    FileUtils.remove_entry(@dir) if @dir && File.exist?(@dir)
  end

  def test_the_page_draws_its_charts_and_shows_the_figures_strata_stats_prints
    traffic_between_snapshots
    @sampler.publish
    plant_a_vm_watch_report

    dom = Chromium.dump_dom(url("/?token=#{TOKEN}"))
    stats = strata_stats_json

    assert_includes dom, %(id="status" class="status">live<)
    hit_ratio = chart(dom, "chart-hit-ratio")
    assert_equal [2, 2, 2], %w[l1 l2 store].map { |line| points(hit_ratio, line) }, "a point per interval with reads"
    # Counts are points even when zero: the page's own polls add one each.
    drawn = points(chart(dom, "chart-store"), "fills")
    assert_operator drawn, :>=, 2
    assert_equal [drawn, drawn], %w[l1 l2].map { |tier| points(chart(dom, "chart-evictions"), tier) }
    assert_equal [1, 1, 1], %w[read_hit fetch_miss write].map { |op| points(chart(dom, "chart-latency"), op) }
    figures = dom.scan(/data-figure="([^"]+)">([^<]*)</).to_h
    # l1.entries counts the history's own keys (SharedHistory: a head and one per point). The
    # page's snapshot was taken before its poll appended its point (drawn, with that one), and
    # polls after it may have appended more before strata stats read the table.
    history_keys = 1 + Strata::Dashboard::SharedHistory.new(interval: 0).series(@store.stack[:l1])[:t].size
    assert_includes [drawn, drawn + 1], figures.fetch("l1.entries").to_i - (stats[:l1][:entries] - history_keys)
    expected = {"l1.slots" => stats[:l1][:slots], "l1.size" => stats[:l1][:size]}
    %i[curr_items bytes get_hits get_misses evictions].each { |name| expected["l2.0.#{name}"] = stats[:memcached][0][name] }
    %i[hits misses writes].each { |name| expected["l1.counters.#{name}"] = stats[:l1][:counters][name] }
    %i[hits misses].each { |name| expected["l2.counters.#{name}"] = stats[:memcached_counters][name] }
    %i[fills invalidations].each { |name| expected["store.#{name}"] = stats[:store][name] }
    expected["store.operations.read_hit.count"] = stats[:store][:operations][:read_hit][:count]
    assert_equal expected.transform_values(&:to_s), figures.slice(*expected.keys)
    misses = rows(dom, "top-misses")
    # The events' keys carry the namespace from Active Support 7.2 on.
    keys = misses.map(&:first).grep(/user/).map { |key| key.delete_prefix("#{@store.options[:namespace]}:") }
    assert_equal %w[user/0 user/1 user/2 user/3], keys.sort
    assert_equal [["posts", "1"]], rows(dom, "top-invalidations")
    assert_equal 4, rows(dom, "top-fill-time").count { |key, _ms, fills| key.include?("user/") && fills == "1" }
    assert_match(%r{<table id="vm-watch".*<td class="key">GET /plant</td>}m, dom)
  end

  # A memcached server that a process of the host considers down (its record in L1, as
  # Meta::HostOutages writes it) says since when beside the server's figures.
  def test_a_memcached_server_marked_down_says_since_when
    server = @options[:memcached][:servers].first
    since = Time.at(1_764_000_000, 123, :millisecond)
    record = [(since.to_r * 1000).to_i, Process.pid].pack(Strata::Meta::HostOutages::PACK)
    assert @store.stack[:l1].set(Strata::Meta::HostOutages.key(server), record)

    dom = Chromium.dump_dom(url("/?token=#{TOKEN}"))

    assert_match(%r{<td class="key">#{Regexp.escape(server)}</td><td>.*down since 2025-11-24T16:00:00.123Z \(marked by process #{Process.pid} on this host\)}, dom)
  end

  def test_a_screenshot_of_the_page_is_a_png
    traffic_between_snapshots
    file = File.join(@dir, "dashboard.png")

    Chromium.screenshot(url("/?token=#{TOKEN}"), file)

    assert_equal "\x89PNG".b, File.binread(file, 4)
  end

  def test_without_the_token_the_page_and_its_data_are_refused_and_show_no_key
    traffic_between_snapshots
    @sampler.publish

    dom = Chromium.dump_dom(url("/"))
    responses = ["/", "/data.json", "/data.json?token=wrong-#{TOKEN}", "/dashboard.js"].map { |path| Net::HTTP.get_response(URI(url(path))) }

    assert_equal %w[401 401 401 401], responses.map(&:code)
    responses.each { |response| assert_equal %(Basic realm="Strata dashboard", charset="UTF-8"), response["www-authenticate"] }
    assert_includes responses.first.body, "a valid token is needed"
    [dom, *responses.map(&:body)].each { |body| refute_match(/user|posts/, body) }
  end

  # What a browser sends once it asked for credentials after the 401: the token as the password
  # lets the page in, and its own requests (the data, the script) with it.
  def test_the_token_as_a_basic_password_lets_the_browser_in
    traffic_between_snapshots
    @sampler.publish

    dom = Chromium.dump_dom("http://admin:#{TOKEN}@127.0.0.1:#{@server.port}/")

    assert_includes dom, %(id="status" class="status">live<)
  end

  private

  def url(path)
    "http://127.0.0.1:#{@server.port}#{path}"
  end

  # Three snapshots with traffic between: fetches that miss everywhere and fill (memcached
  # misses), then reads that miss L1 (its copies deleted) and hit memcached.
  def traffic_between_snapshots
    data_json
    4.times { |i| @store.fetch("user/#{i}") { "user #{i}" } }
    @store.fetch("posts/1", tags: ["posts"]) { "post" }
    @store.invalidate_tags("posts")
    data_json
    l1 = @store.stack[:l1]
    l1.keys.reject { |key| key.start_with?("\x00") }.each { |key| l1.delete(key) }
    4.times { |i| @store.read("user/#{i}") }
    data_json
  end

  def plant_a_vm_watch_report
    app = lambda do |_env|
      PLANT.call
      [200, {}, []]
    end
    Strata::VMWatch.new(app, ring: @ring, logger: Logger.new(nil)).call("REQUEST_METHOD" => "GET", "SCRIPT_NAME" => "", "PATH_INFO" => "/plant")
    assert_equal 1, @ring.to_a.size
  end

  def data_json
    request = Net::HTTP::Get.new(URI(url("/data.json")))
    request["Authorization"] = "Bearer #{TOKEN}"
    response = Net::HTTP.start("127.0.0.1", @server.port) { |http| http.request(request) }
    assert_equal "200", response.code
    JSON.parse(response.body, symbolize_names: true)
  end

  def strata_stats_json
    out, err, status = Open3.capture3(RbConfig.ruby, "-rbundler/setup", "-I", File.join(ROOT, "lib"), EXE, "stats", "--json", "--config", @config)
    assert status.success?, err
    JSON.parse(out, symbolize_names: true)
  end

  def chart(dom, id)
    dom[%r{<svg id="#{id}".*?</svg>}m] || flunk("no #{id} in the page")
  end

  # The points drawn on the chart's line for series name.
  def points(chart, name)
    path = chart[/<path [^>]*data-series="#{Regexp.escape(name)}"[^>]*>/] || flunk("no line for #{name}")
    drawn = path[/ d="([^"]*)"/, 1].scan(/[ML]\s*[\d.]+\s+[\d.]+/).size
    assert_equal path[/data-points="(\d+)"/, 1].to_i, drawn
    drawn
  end

  # The rows of a top table: [[key, figure, ...], ...].
  def rows(dom, id)
    body = dom[%r{<table id="#{id}".*?</table>}m] || flunk("no #{id} in the page")
    body.scan(%r{<tr><td class="key">(.*?)</tr>}m).map { |(row)| row.gsub(%r{</td><td class="num">}, "\t").gsub(/<[^>]+>/, "").split("\t") }
  end
end
