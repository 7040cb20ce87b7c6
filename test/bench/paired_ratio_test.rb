# frozen_string_literal: true

require "minitest/autorun"
require_relative "../../bench/paired_ratio"
require_relative "../../bench/result"

# bin/bench judges its targets on PairedRatio; these pin down what it pairs and when it falls back.
class PairedRatioTest < Minitest::Test
  def result(rounds, ips: rounds.sort[rounds.size / 2])
    Strata::Bench::Result.new(store: "s", case_name: "c", ips: ips, error_pct: 0.0, rounds: rounds)
  end

  def test_the_median_of_the_ratios_of_rounds_measured_together
    # A slow spell hit both cells in rounds 2 and 3; the top cell is 10% faster in every round.
    top = result([110.0, 55.0, 44.0, 110.0, 110.0])
    bottom = result([100.0, 50.0, 40.0, 100.0, 100.0])

    assert_in_delta 1.1, Strata::Bench::PairedRatio.of(top, bottom), 1e-9
  end

  def test_a_spell_that_starts_between_two_cells_of_a_round_moves_only_that_rounds_ratio
    # The spell began after top's round 3 and before bottom's: the medians are 105 and 60.
    top = result([105.0, 105.0, 105.0, 63.0, 63.0])
    bottom = result([100.0, 100.0, 60.0, 60.0, 60.0])

    assert_in_delta 1.75, top.ips / bottom.ips, 1e-9
    assert_in_delta 1.05, Strata::Bench::PairedRatio.of(top, bottom), 1e-9
  end

  def test_an_even_number_of_rounds_takes_the_middle_two
    assert_in_delta 1.15, Strata::Bench::PairedRatio.of(result([1.0, 1.1, 1.2, 1.3]), result([1.0, 1.0, 1.0, 1.0])), 1e-9
  end

  def test_rounds_that_do_not_pair_up_fall_back_to_the_ratio_of_medians
    assert_in_delta 2.0, Strata::Bench::PairedRatio.of(result([2.0, 4.0], ips: 4.0), result([2.0], ips: 2.0)), 1e-9
    assert_in_delta 3.0, Strata::Bench::PairedRatio.of(result([], ips: 6.0), result([], ips: 2.0)), 1e-9
    assert_in_delta 1.5, Strata::Bench::PairedRatio.of(result([3.0, 3.0], ips: 3.0), result([2.0, 0.0], ips: 2.0)), 1e-9
  end
end
