# frozen_string_literal: true

require "minitest/autorun"
require_relative "../../bench/research/vm_cache"

# The VM-cache benchmark's parts: its pool serves exactly the requests asked for, its clean
# request is clean, and its figures pair rounds.
class VMCacheBenchTest < Minitest::Test
  VMCache = Strata::Bench::VMCache

  def test_the_pool_serves_as_many_requests_as_asked_on_its_own_threads
    pool = VMCache::Pool.new(3)
    served = Queue.new
    pool.serve(-> { served << Thread.current }, 7)
    pool.serve(-> { served << Thread.current }, 2)

    assert_equal 9, served.size
    refute_includes Array.new(9) { served.pop }, Thread.current
  ensure
    pool&.close
  end

  def test_the_clean_request_moves_no_counter_and_extend_does
    moved = VMCache.counters_moved

    assert_equal({}, moved["clean"])
    refute_empty moved["Object#extend"]
  end

  def test_the_slowdown_pairs_rounds
    # Round 2 ran through a slow spell: both CPU times doubled, their ratio stayed.
    assert_in_delta 20.0, VMCache.slowdown([40.0, 80.0, 40.0], [50.0, 100.0, 50.0]), 1e-9
  end

  def test_measure_gives_a_figure_per_round_for_each_job
    figures = VMCache.measure({"a" => ->(n) { n.times { [1, 2].sum } }}, time: 0.01, warmup: 0.01, rounds: 2)

    assert_equal 2, figures["a"].ips.size
    assert_equal 2, figures["a"].cpu_us.size
  end
end
