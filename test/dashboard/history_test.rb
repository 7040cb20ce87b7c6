# frozen_string_literal: true

require "test_helper"
require "json"
require "securerandom"
require "strata/dashboard"
require "support/child_processes"
require "support/fake_clock"

# What both histories do (History in the dashboard's process, SharedHistory in the host's L1
# table), on snapshots shaped as Stats#snapshot's: running totals become per-interval hit
# ratios, mean latencies and counts. The including class's new_history gives one that
# answers record(snapshot, time) and series.
module DashboardHistoryContract
  def test_counters_give_hit_ratios_per_tier_and_store_and_mean_latencies_per_interval
    history = new_history
    history.record(snapshot(l1: tier(10, 10), memcached_counters: {hits: 0, misses: 0}, store: store(reads: [5, 5], write: [4, 400])), 1.0)
    history.record(snapshot(l1: tier(40, 20), memcached_counters: {hits: 1, misses: 3}, store: store(reads: [8, 6], write: [6, 1_000])), 2.0)
    history.record(snapshot(l1: tier(40, 20), memcached_counters: {hits: 1, misses: 3}, store: store(reads: [8, 6], write: [6, 1_000])), 3.0)

    series = history.series

    assert_equal [2.0, 3.0], series[:t]
    assert_equal({l1: [0.75, nil], l2: [0.25, nil], store: [0.75, nil]}, series[:hit_ratio])
    assert_equal({"read_hit" => [nil, nil], "fetch_miss" => [nil, nil], "write" => [300.0, nil]}, series[:latency])
  end

  def test_memcached_without_counters_gives_its_servers_hit_ratio
    history = new_history
    history.record(snapshot(memcached: [server(5, 5), server(0, 0), {server: "x:1", state: "unreachable"}]), 1.0)
    history.record(snapshot(memcached: [server(8, 6), server(1, 0), {server: "x:1", state: "unreachable"}]), 2.0)

    assert_equal({l2: [0.8]}, history.series[:hit_ratio])
  end

  def test_the_store_section_gives_counts_per_interval_and_a_total_that_fell_gives_no_point
    history = new_history
    history.record(snapshot(store: {fills: 5, fill_us: 9, lock_waits: 1, lease_waits: 0, stale_hits: 0, invalidations: 2}), 1.0)
    history.record(snapshot(store: {fills: 9, fill_us: 99, lock_waits: 1, lease_waits: 2, stale_hits: 0, invalidations: 3}), 2.0)
    history.record(snapshot(store: {fills: 2, fill_us: 99, lock_waits: 1, lease_waits: 2, stale_hits: 0, invalidations: 3}), 3.0)

    assert_equal({fills: [4, nil], lock_waits: [0, 0], lease_waits: [2, 0], stale_hits: [0, 0], invalidations: [1, 0]},
      history.series[:store])
  end

  def test_the_ring_keeps_the_newest_points
    history = new_history(capacity: 3)
    6.times { |i| history.record(snapshot, i.to_f) }

    assert_equal [3.0, 4.0, 5.0], history.series[:t]
  end

  # Each tier's evictions from its counters (memcached's from its servers, over those up at
  # both ends of the interval), and the SQL tier's expired rows.
  def test_evictions_and_expired_rows_per_interval_per_tier
    history = new_history
    servers = ->(a, b) { [server(0, 0).merge(server: "a:1", evictions: a), b && server(0, 0).merge(server: "b:1", evictions: b)].compact }
    history.record(snapshot(l1: tier(0, 0, evictions: 5), sql: {counters: {evictions: 1, expired: 10}}, memcached: servers.call(100, 7)), 1.0)
    history.record(snapshot(l1: tier(0, 0, evictions: 9), sql: {counters: {evictions: 1, expired: 12}}, memcached: servers.call(130, 8)), 2.0)
    history.record(snapshot(l1: tier(0, 0, evictions: 9), sql: {counters: {evictions: 4, expired: 12}}, memcached: servers.call(135, nil)), 3.0)
    history.record(snapshot(l1: tier(0, 0, evictions: 2), sql: {counters: {evictions: 4, expired: 20}}, memcached: servers.call(3, nil)), 4.0)

    series = history.series

    assert_equal({l1: [4, 0, nil], l2: [31, 5, nil], l3: [0, 3, 0]}, series[:evictions])
    assert_equal({l3: [2, 0, 8]}, series[:expired])
  end

  private

  def snapshot(l1: {entries: 0}, memcached: nil, memcached_counters: nil, sql: nil, store: nil)
    {time: "2026-01-01T00:00:00Z", l1: l1, memcached: memcached, memcached_counters: memcached_counters, sql: sql, store: store}.compact
  end

  def tier(hits, misses, evictions: nil)
    {entries: 0, counters: {hits: hits, misses: misses, hit_ratio: nil, writes: 0, evictions: evictions}.compact}
  end

  # The store's figures as strata stats gives them: reads are [read hits, fetch misses], write
  # [timed calls, their microseconds].
  def store(reads:, write:)
    {fills: 0, operations: {read_hit: {count: reads[0], timed: 0, us: 0}, fetch_miss: {count: reads[1], timed: 0, us: 0},
                            write: {count: write[0], timed: write[0], us: write[1]}}}
  end

  def server(hits, misses)
    {server: "127.0.0.1:1", state: "up", get_hits: hits, get_misses: misses}
  end
end

class DashboardHistoryTest < Minitest::Test
  include DashboardHistoryContract

  private

  def new_history(capacity: Strata::Dashboard::History::CAPACITY)
    Strata::Dashboard::History.new(capacity: capacity)
  end
end

# SharedHistory: the contract over a real L1 table, and what sharing it adds: the processes
# of a host (two dashboards as two workers of an app, processes appending at once) serve one
# series, each point appended once; a history the table lost starts afresh.
class DashboardSharedHistoryTest < Minitest::Test
  include DashboardHistoryContract
  include Strata::TestSupport
  include Strata::TestSupport::TrackedChildren

  # A SharedHistory over a table, answering as History does.
  Over = Struct.new(:shared, :table) do
    def record(snapshot, time) = shared.record(table, snapshot, time)

    def series = shared.series(table)
  end

  TABLE_SIZE = 1 << 20 # the file is preallocated: kept small
  TOKEN = "history-test-#{SecureRandom.hex(16)}"
  DEADLINE = 30.0
  HEAD_KEY = Strata::Dashboard::SharedHistory::HEAD_KEY

  def setup
    @dir = private_tmpdir
    @l1_path = File.join(@dir, "app.l1")
    @table = Strata::Tiers::SharedMemory.new(path: @l1_path, size: TABLE_SIZE)
    @pids = []
  end

  def teardown
    kill_tracked_children
    @table&.close
    FileUtils.remove_entry(@dir) if @dir && File.exist?(@dir)
  end

  # The page polls once a second and each poll lands on either worker (here in a made-up
  # order; two viewers at once in some seconds). Whichever first finds the last point an
  # interval old appends the next: both serve the same series in a second, and each series
  # served is the one before it, or it with one point more.
  def test_two_dashboards_over_one_table_serve_one_series_that_only_grows
    clock = Strata::TestSupport::FakeClock.new(1_764_000_000.0)
    workers = 2.times.map { Strata::Dashboard.new(config: {l1: {path: @l1_path}}, token: TOKEN, vm_watch: nil, clock: clock) }
    @table.set("k", "v")
    polls = [[0], [0], [1], [0, 1], [1], [1, 0], [0]]
    served = polls.each_with_index.flat_map do |polled, second|
      clock.now += 1
      @table.get("k")
      @table.get("missing") if second.odd?
      answers = polled.map { |worker| series_json(workers[worker]) }
      assert_equal answers.first, answers.last, "second #{second}"
      answers
    end

    assert_empty served.first["t"], "the first snapshot only starts the history"
    served.each_cons(2) do |before, after|
      assert_includes [0, 1], after["t"].size - before["t"].size
      assert_equal before, first_points(after, before["t"].size)
    end
    assert_equal (2..7).map { |s| 1_764_000_000.0 + s }, served.last["t"]
    assert_equal [0.5, 1.0, 0.5, 1.0, 0.5, 1.0], served.last["hit_ratio"]["l1"]
    assert_equal [0] * 6, served.last["evictions"]["l1"]
  end

  # Processes appending at once: every point that a process appended is in the series, once,
  # and times only go forward.
  def test_processes_appending_at_once_each_point_is_appended_once
    ready_r, ready_w = IO.pipe
    go_r, go_w = IO.pipe
    won_r, won_w = IO.pipe
    pids = 4.times.map do |n|
      fork_tracked do
        [ready_r, go_w, won_r].each(&:close)
        table = Strata::Tiers::SharedMemory.new(path: @l1_path, size: TABLE_SIZE)
        history = Strata::Dashboard::SharedHistory.new(interval: 0)
        ready_w.write("#{n}\n")
        go_r.read # EOF: all start together
        won = 50.times.filter_map do |i|
          time = Time.now.to_f
          time if history.record(table, snapshot(l1: tier(i, n)), time)
        end
        won_w.write(JSON.generate(won) + "\n")
        table.close
        true
      end
    end
    [ready_w, go_r, won_w].each(&:close)
    4.times { assert ready_r.wait_readable(DEADLINE) && ready_r.gets, "a child did not start" }
    go_w.close
    won = 4.times.flat_map { JSON.parse(won_r.gets || flunk("a child did not report")) }
    assert_equal [0] * 4, pids.map { |pid| reap_child(pid)&.exitstatus }

    t = Strata::Dashboard::SharedHistory.new(interval: 0).series(@table)[:t]

    assert_operator won.size, :>, 4
    assert_equal won.sort, t
    assert_equal t.uniq, t
  ensure
    [ready_r, ready_w, go_r, go_w, won_r, won_w].each { |io| io&.close unless io&.closed? }
  end

  def test_a_point_is_appended_once_the_last_is_an_interval_old_and_never_back_in_time
    history = Strata::Dashboard::SharedHistory.new(interval: 1.0)

    appended = [10.0, 10.5, 11.0, 10.9, 11.5, 12.25].map { |time| history.record(@table, snapshot, time) }

    assert_equal [false, false, true, false, false, true], appended
    assert_equal [11.0, 12.25], history.series(@table)[:t]
  end

  # The table evicted the head, or holds something else under its key, or the host's clock
  # went back: no error, the history starts afresh (its old points are not read again).
  def test_a_lost_or_unreadable_head_or_a_clock_gone_back_restarts_the_history_empty
    history = new_history
    4.times { |i| history.record(snapshot, 100.0 + i) }
    assert_equal [101.0, 102.0, 103.0], history.series[:t]

    ["lost", "not json", JSON.generate(v: 99, epoch: "x", seq: 3, t: 1.0, totals: {})].each do |held|
      (held == "lost") ? @table.delete(HEAD_KEY) : @table.set(HEAD_KEY, held)
      assert_empty history.series[:t], held
      history.record(snapshot, 200.0)
      history.record(snapshot, 201.0)
      assert_equal [201.0], history.series[:t], held
      @table.delete(HEAD_KEY)
      history.record(snapshot, 100.0)
    end

    history.record(snapshot, 101.0)
    history.record(snapshot, 101.0 - Strata::Dashboard::SharedHistory::CLOCK_SLACK - 1)
    assert_empty history.series[:t]
  end

  # Every figure a snapshot can carry, three memcached servers: each value a small fraction of
  # MAX_BYTES, itself under the smallest table's max_value_size.
  def test_the_values_stay_far_under_the_tables_max_value_size
    history = new_history
    operations = %i[read_hit fetch_miss write delete].to_h { |op| [op, {count: 123_456, timed: 12_345, us: 9_876_543}] }
    counters = Strata::Counters::TIER_FIGURES.to_h { |name| [name.to_sym, 1_234_567] }
    full = snapshot(l1: {counters: counters.merge(operations: operations)}, memcached_counters: counters,
      sql: {counters: counters.merge(expiry_passes: 5, expired: 1_234_567)},
      memcached: 3.times.map { |i| server(1_234_567, 1_234_567).merge(server: "cache-#{i}.internal:11211", evictions: 1_234_567) },
      store: {fills: 1, lock_waits: 1, lease_waits: 1, stale_hits: 1, invalidations: 1, operations: operations})
    history.record(full, 1_764_000_000.123)
    history.record(full, 1_764_000_001.123)

    sizes = [HEAD_KEY, Strata::Dashboard::SharedHistory.point_key(1)].map { |key| @table.get(key).bytesize }

    assert_equal 1, history.series[:t].size
    sizes.each { |size| assert_operator size, :<, Strata::Dashboard::SharedHistory::MAX_BYTES / 8 }
    assert_operator Strata::Dashboard::SharedHistory::MAX_BYTES, :<, @table.max_value_size
  end

  private

  def new_history(capacity: Strata::Dashboard::History::CAPACITY)
    Over.new(Strata::Dashboard::SharedHistory.new(interval: 0, capacity: capacity), @table)
  end

  # series (data.json's) cut to its first n points.
  def first_points(series, n)
    series.to_h do |field, columns|
      [field, (field == "t") ? columns.first(n) : columns.transform_values { |values| values.first(n) }.reject { |_, values| values.empty? }]
    end
  end

  def series_json(dashboard)
    env = {"REQUEST_METHOD" => "GET", "SCRIPT_NAME" => "", "PATH_INFO" => "/data.json", "QUERY_STRING" => "",
           "rack.url_scheme" => "http", "HTTP_AUTHORIZATION" => "Bearer #{TOKEN}"}
    status, _, body = dashboard.call(env)
    assert_equal 200, status
    JSON.parse(body.join).fetch("series")
  end
end
