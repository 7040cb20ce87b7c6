# frozen_string_literal: true

require "minitest/autorun"
require_relative "../../bench/cluster/run"

# How bin/cluster's report counts (bench/cluster/report.rb), on records made up here: an answer
# stale past the bound, the errors of a killed worker's connections apart from the others, the
# time until every host shows a change, and counters that went down (a node started again).
class BenchClusterReportTest < Minitest::Test
  Phase = Strata::Bench::Cluster::Run::Phase
  START = 100.0
  PHASES = [Phase.new("steady", 0, 10, nil), Phase.new("worker killed", 10, 20, :worker)].freeze
  ENTRY = Strata::Bench::Cluster::Load::ENTRY

  def report(records:, writes: [], probes: [], samples: [], faults: [])
    Strata::Bench::Cluster::Report.new(mode: "Strata", phases: PHASES, start: START, records: records, writes: writes,
      probes: probes, samples: samples, faults: faults, bound: 1.0)
  end

  # [started, latency, kind, id, change shown, status, worker]
  def answer(at, id, change, status: 200, worker: 11)
    [START + at, 0.002, ENTRY, id, change, status, worker]
  end

  def test_an_answer_is_stale_past_the_bound_only_when_it_lacks_a_change_acknowledged_a_bound_before
    writes = [[5, 1, START + 2.0, "app1", START + 1.99], [6, 1, START + 4.0, "sql", START + 3.99]]
    records = {"app1" => [answer(1.0, 1, 0), answer(2.5, 1, 0), answer(3.5, 1, 0), answer(4.5, 1, 5), answer(5.5, 1, 5), answer(5.6, 1, 6), answer(6, 2, 0)]}
    row = report(records: records, writes: writes).requests(PHASES[0], "app1")
    assert_equal 2, row[:stale_past_bound], "3.5 s lacks change 5 (acknowledged at 2 s); 5.5 s lacks 6 (at 4 s)"
    assert_equal 2, row[:stale_within_bound], "2.5 s and 4.5 s, within the bound"
    assert_equal 7, row[:requests]
  end

  def test_errors_on_the_killed_workers_connections_are_counted_apart
    faults = [{fault: :worker, pid: 22, host: "app2", at: START + 12, detail: "kill -9"}]
    records = {"app2" => [answer(11, 1, 0, status: 0, worker: 22), answer(12.5, 1, 0, status: 0, worker: 22),
      answer(13, 1, 0, status: 0, worker: 23), answer(14, 1, 0, status: 500, worker: 23)]}
    row = report(records: records, faults: faults).requests(PHASES[1], "app2")
    assert_equal 1, row[:killed_worker_errors], "the killed worker's connection, after the kill"
    assert_equal 3, row[:errors], "before the kill, another worker's, and a 500"
    assert_equal({stale_past_bound: 0, errors: 3}, report(records: records, faults: faults).violations)
  end

  def test_a_change_converges_when_every_host_shows_it
    writes = [[1, 1, START + 1, "app1", START + 1], [2, 2, START + 2, "app2", START + 2], [3, 3, START + 3, "app3", START + 3],
      [4, 4, nil, "app3", START + 4]]
    probes = [[1, "a", 0.004, true], [1, "b", 0.030, true], [2, "a", 0.001, true], [2, "b", nil, true], [3, "a", nil, false], [3, "b", 0.002, true]]
    row = report(records: {"a" => [], "b" => []}, writes: writes, probes: probes).convergence(PHASES[0])
    assert_equal({changes: 3, failed_writes: 1, p50_ms: 30.0, p99_ms: 30.0, max_ms: 30.0, not_shown: 1, not_answered: 1}, row)
  end

  def test_a_counter_that_went_down_counts_from_zero
    samples = [{at: START, memcached: {"mc1" => {"get_hits" => 90, "get_misses" => 10, "uptime" => 50}}, l1: {}, transactions: 100, queries: 50},
      {at: START + 10, memcached: {"mc1" => {"get_hits" => 30, "get_misses" => 10, "uptime" => 4}}, l1: {}, transactions: 300, queries: 550}]
    tiers = report(records: {"a" => []}, samples: samples).tiers(PHASES[0])
    assert_equal 0.75, tiers[:memcached_nodes], "the node started again: its 30 hits and 10 misses"
    assert_equal 20, tiers[:transactions_per_second]
    assert_equal 50, tiers[:queries_per_second]
    assert_nil tiers[:l1], "no L1 counters: another store"
  end
end
