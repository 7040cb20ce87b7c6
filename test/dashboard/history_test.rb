# frozen_string_literal: true

require "test_helper"
require "strata/dashboard"

# Dashboard::History on snapshots shaped as Stats#snapshot's: running totals become per-interval
# hit ratios, mean latencies and counts.
class DashboardHistoryTest < Minitest::Test
  def test_counters_give_hit_ratios_per_tier_and_store_and_mean_latencies_per_interval
    history = Strata::Dashboard::History.new
    history.record(snapshot(l1: tier(10, 10), memcached_counters: {hits: 0, misses: 0}, store: store(reads: [5, 5], write: [4, 400])), 1.0)
    history.record(snapshot(l1: tier(40, 20), memcached_counters: {hits: 1, misses: 3}, store: store(reads: [8, 6], write: [6, 1_000])), 2.0)
    history.record(snapshot(l1: tier(40, 20), memcached_counters: {hits: 1, misses: 3}, store: store(reads: [8, 6], write: [6, 1_000])), 3.0)

    series = history.series

    assert_equal [2.0, 3.0], series[:t]
    assert_equal({l1: [0.75, nil], l2: [0.25, nil], store: [0.75, nil]}, series[:hit_ratio])
    assert_equal({"read_hit" => [nil, nil], "fetch_miss" => [nil, nil], "write" => [300.0, nil]}, series[:latency])
  end

  def test_memcached_without_counters_gives_its_servers_hit_ratio
    history = Strata::Dashboard::History.new
    history.record(snapshot(memcached: [server(5, 5), server(0, 0), {server: "x:1", state: "unreachable"}]), 1.0)
    history.record(snapshot(memcached: [server(8, 6), server(1, 0), {server: "x:1", state: "unreachable"}]), 2.0)

    assert_equal({l2: [0.8]}, history.series[:hit_ratio])
  end

  def test_the_store_section_gives_counts_per_interval_and_a_total_that_fell_gives_no_point
    history = Strata::Dashboard::History.new
    history.record(snapshot(store: {fills: 5, fill_us: 9, lock_waits: 1, lease_waits: 0, stale_hits: 0, invalidations: 2}), 1.0)
    history.record(snapshot(store: {fills: 9, fill_us: 99, lock_waits: 1, lease_waits: 2, stale_hits: 0, invalidations: 3}), 2.0)
    history.record(snapshot(store: {fills: 2, fill_us: 99, lock_waits: 1, lease_waits: 2, stale_hits: 0, invalidations: 3}), 3.0)

    assert_equal({fills: [4, nil], lock_waits: [0, 0], lease_waits: [2, 0], stale_hits: [0, 0], invalidations: [1, 0]},
      history.series[:store])
  end

  def test_the_ring_keeps_the_newest_points
    history = Strata::Dashboard::History.new(capacity: 3)
    6.times { |i| history.record(snapshot, i.to_f) }

    assert_equal [3.0, 4.0, 5.0], history.series[:t]
  end

  private

  def snapshot(l1: {entries: 0}, memcached: nil, memcached_counters: nil, store: nil)
    {time: "2026-01-01T00:00:00Z", l1: l1, memcached: memcached, memcached_counters: memcached_counters, store: store}.compact
  end

  def tier(hits, misses)
    {entries: 0, counters: {hits: hits, misses: misses, hit_ratio: nil, writes: 0}}
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
