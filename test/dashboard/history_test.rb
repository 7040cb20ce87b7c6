# frozen_string_literal: true

require "test_helper"
require "strata/dashboard"

# Dashboard::History on snapshots shaped as Stats#snapshot's: running totals become per-interval
# hit ratios, mean latencies and counts.
class DashboardHistoryTest < Minitest::Test
  def test_tier_counters_give_a_hit_ratio_and_mean_latencies_per_interval
    history = Strata::Dashboard::History.new
    history.record(snapshot(l1: counters(hits: 10, misses: 10, get: [20, 2_000])), 1.0)
    history.record(snapshot(l1: counters(hits: 40, misses: 20, get: [60, 4_000])), 2.0)
    history.record(snapshot(l1: counters(hits: 40, misses: 20, get: [60, 4_000])), 3.0)

    series = history.series

    assert_equal [2.0, 3.0], series[:t]
    assert_equal({l1: [0.75, nil]}, series[:hit_ratio])
    assert_equal({"l1.get" => [50.0, nil]}, series[:latency])
  end

  def test_memcached_without_counters_gives_its_servers_hit_ratio
    history = Strata::Dashboard::History.new
    history.record(snapshot(memcached: [server(5, 5), server(0, 0), {server: "x:1", state: "unreachable"}]), 1.0)
    history.record(snapshot(memcached: [server(8, 6), server(1, 0), {server: "x:1", state: "unreachable"}]), 2.0)

    assert_equal({l2: [0.8]}, history.series[:hit_ratio])
  end

  def test_the_store_section_gives_counts_per_interval_and_a_total_that_fell_gives_no_point
    history = Strata::Dashboard::History.new
    history.record(snapshot(store: {fills: 5, waits: 1, stale: 0, invalidations: 2}), 1.0)
    history.record(snapshot(store: {fills: 9, waits: 1, stale: 0, invalidations: 3}), 2.0)
    history.record(snapshot(store: {fills: 2, waits: 1, stale: 0, invalidations: 3}), 3.0)

    assert_equal({fills: [4, nil], waits: [0, 0], stale: [0, 0], invalidations: [1, 0]}, history.series[:store])
  end

  def test_the_ring_keeps_the_newest_points
    history = Strata::Dashboard::History.new(capacity: 3)
    6.times { |i| history.record(snapshot, i.to_f) }

    assert_equal [3.0, 4.0, 5.0], history.series[:t]
  end

  private

  def snapshot(l1: {entries: 0}, memcached: nil, store: nil)
    {time: "2026-01-01T00:00:00Z", l1: l1, memcached: memcached, store: store}.compact
  end

  def counters(hits:, misses:, get:)
    {entries: 0, counters: {hits: hits, misses: misses, operations: {get: {count: get[0], total_us: get[1]}}}}
  end

  def server(hits, misses)
    {server: "127.0.0.1:1", state: "up", get_hits: hits, get_misses: misses}
  end
end
