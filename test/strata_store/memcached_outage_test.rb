# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "support/memcached_process"
require "support/fake_clock"
require "json"
require "open3"
require "rbconfig"
require "yaml"

# Issue 22, fault 1, through the Rails API: a memcached server stalls (SIGSTOP) long enough to be
# marked down; a write, a delete and a counter change go to the gutter meanwhile; the server runs
# again and retry_after passes. Then each key reads as what was written during the outage or a
# miss, never the value from before it, and the deleted key stays deleted. L2 alone and L1 over
# L2. The ring's clock is the test's, so retry_after passes only when the test says so.
class StrataStoreMemcachedOutageTest < Strata::StoreCase
  RETRY_AFTER = 10

  FakeClock = Strata::TestSupport::FakeClock

  def setup
    @clock = FakeClock.new
    @primary = Strata::TestSupport::MemcachedProcess.new.start
    @gutter = Strata::TestSupport::MemcachedProcess.new.start
  end

  def teardown
    @primary.kill
    @gutter.kill
  end

  def test_l2_only
    cache = ActiveSupport::Cache::StrataStore.new(memcached: memcached_options)
    @stores << cache
    outage(cache, written_after: [nil])
  end

  def test_l1_and_l2
    # L1 keeps the v2 written during the outage; memcached's v1 must not come back under it.
    outage(build_store(memcached: memcached_options), written_after: ["v2"])
  end

  # The same outage, counted: what went to the gutter while the server was down (reads, writes,
  # deletes) and what its recovery deleted, in the host's counters, as the store and
  # `strata stats` (JSON and text) show them.
  def test_gutter_traffic_and_recovery_are_counted_and_shown
    cache = build_store(memcached: memcached_options)
    client = cache.stack[:l2].client
    written, deleted, counted, probe, *absent = names_on(cache, client, @primary.server, 7)
    assert cache.write(written, "v1")
    assert cache.write(deleted, "v1")
    assert_equal({}, gutter_figures(cache).reject { |_name, n| n.zero? }, "nothing went to the gutter yet")

    @primary.pause
    2.times { assert_nil cache.read(probe), "a timed-out read is a miss" }
    refute client.ring.up?(@primary.server)
    # The read that marked it down may have gone on to the gutter: counted from here.
    reads = gutter_figures(cache)[:gutter_reads]
    assert cache.write(written, "v2")
    capture_reports { cache.delete(deleted) }
    assert_equal 1, cache.increment(counted)
    assert_nil cache.read(absent[0])
    assert_equal({}, cache.read_multi(*absent[1, 2]))
    # Four reads: the write's read back (Copies#settle), the read and the read_multi's two keys.
    assert_equal({gutter_reads: reads + 4, gutter_writes: 2, gutter_deletes: 1, recovery_deletes: 0, recovery_flushes: 0},
      gutter_figures(cache))

    @primary.resume
    @clock.now += RETRY_AFTER
    assert_nil cache.read(probe), "the first call to the server recovers it"
    # The recovery log held written, deleted and counted: deleted on the server, then their
    # gutter copies.
    assert_equal({gutter_reads: reads + 4, gutter_writes: 2, gutter_deletes: 4, recovery_deletes: 3, recovery_flushes: 0},
      gutter_figures(cache))

    config = File.join(@tmpdir, "strata.yml")
    File.write(config, YAML.dump("l1" => {"path" => table_path}, "memcached" => {"servers" => [@primary.server, @gutter.server]}))
    out, err, status = run_stats("--json", "--config", config)
    assert status.success?, err
    json = JSON.parse(out, symbolize_names: true)[:memcached_counters]
    assert_equal gutter_figures(cache), json.slice(*gutter_figures(cache).keys)
    out, err, status = run_stats("--config", config)
    assert status.success?, err
    assert_match(/^l2 +gutter +gutter_reads=#{reads + 4} gutter_writes=2 gutter_deletes=4 recovery_deletes=3 recovery_flushes=0$/, out)
  end

  # The outage as another process sees it: `strata stats`, run as a child process, reads from the
  # L1 file since when this process considers the server down (its first mark, kept through a
  # retry that failed again), and nothing once it answered; the gutter was never down.
  def test_down_since_is_shown_from_another_process_until_the_recovery
    cache = build_store(memcached: memcached_options)
    client = cache.stack[:l2].client
    probe = names_on(cache, client, @primary.server, 1).first
    config = File.join(@tmpdir, "strata.yml")
    File.write(config, YAML.dump("l1" => {"path" => table_path}, "memcached" => {"servers" => [@primary.server, @gutter.server]}))
    assert_nil stats_servers(config).find { |server| server.key?(:down_since) }, "nothing is down yet"

    @primary.pause
    2.times { assert_nil cache.read(probe), "a timed-out read is a miss" }
    refute client.ring.up?(@primary.server)
    since = client.stats[:down_since].fetch(@primary.server)
    @clock.now += RETRY_AFTER
    assert_nil cache.read(probe), "the retry times out too"
    2.times { assert_nil cache.read(probe) }
    refute client.ring.up?(@primary.server), "down again, its outage going on"

    primary, gutter = stats_servers(config)
    expected = Time.at(since.to_r.floor(3)).utc.iso8601(3)
    assert_equal [@primary.server, expected, Process.pid], primary.values_at(:server, :down_since, :down_marked_by)
    assert_equal "up", gutter[:state]
    refute gutter.key?(:down_since)
    out, err, status = run_stats("--config", config)
    assert status.success?, err
    assert_match(/^l2 +#{Regexp.escape(@primary.server)} +unreachable: .*; down since #{Regexp.escape(expected)} \(marked by process #{Process.pid} on this host\)$/, out)

    @primary.resume
    @clock.now += RETRY_AFTER
    assert_nil cache.read(probe), "the first call to the server recovers it"
    assert client.ring.up?(@primary.server)
    assert_nil stats_servers(config).find { |server| server.key?(:down_since) }, "the recovery deleted the record"
  end

  private

  def stats_servers(config)
    out, err, status = run_stats("--json", "--config", config)
    assert status.success?, err
    JSON.parse(out, symbolize_names: true)[:memcached]
  end

  def gutter_figures(cache)
    cache.stats[:counters][:tiers][:memcached].slice(:gutter_reads, :gutter_writes, :gutter_deletes, :recovery_deletes,
      :recovery_flushes)
  end

  def run_stats(*args)
    root = File.expand_path("../..", __dir__)
    Open3.capture3(RbConfig.ruby, "-rbundler/setup", "-I", File.join(root, "lib"), File.join(root, "exe", "strata"), "stats", *args)
  end

  # stall, write v2, delete, count, recover: reads give v2 or a miss, never v1.
  def outage(cache, written_after:)
    client = cache.stack[:l2].client
    written, deleted, counted, probe = names_on(cache, client, @primary.server, 4)
    assert cache.write(written, "v1")
    assert cache.write(deleted, "v1")
    assert_equal 5, cache.increment(counted, 5)

    @primary.pause
    2.times { assert_nil cache.read(probe), "a timed-out read is a miss" }
    refute client.ring.up?(@primary.server), "two timeouts in a row mark it down"
    assert cache.write(written, "v2"), "the write goes to the gutter"
    reports = capture_reports { cache.delete(deleted) }
    assert_equal [@primary.server], reports.map { |report| report[:error].server },
      "the delete that reached only the gutter is reported once, naming its server"
    assert_nil cache.read(deleted)
    assert_equal "v2", cache.read(written)
    assert_equal 1, cache.increment(counted), "the counter starts again in the gutter"

    @primary.resume
    @clock.now += RETRY_AFTER
    assert_equal [@primary.server, :primary], client.ring.route(tier_key(cache, written))
    no_reports = capture_reports do
      assert_includes written_after, cache.read(written), "v2 or a miss, never v1"
      assert_nil cache.read(deleted), "the deleted key stays deleted"
      assert_equal 1, cache.increment(counted), "the old counter (5) is deleted, not resumed"
    end
    assert_empty no_reports
    assert_nil Strata::Meta::Client.new(servers: [@primary.server]).get(tier_key(cache, deleted))
  end

  def memcached_options
    {servers: [@primary.server, @gutter.server], timeout: 0.3, connect_timeout: 0.3, pool_timeout: 0.3,
     retry_after: RETRY_AFTER, clock: @clock}
  end

  # count names whose keys the ring puts on server.
  def names_on(cache, client, server, count)
    prefix = "outage-#{SecureRandom.hex(4)}-"
    names = (0...10_000).lazy.map { |i| "#{prefix}#{i}" }.select do |name| # bound: 10,000 candidates
      client.ring.server_for(tier_key(cache, name)) == server
    end
    names.first(count)
  end
end
