# frozen_string_literal: true

require "test_helper"
require "strata/tiers/sql"

# Tiers::SQL::Sizing#sample_ranges alone: the id ranges an expiry pass counts below its newest rows. For
# the estimate to be unbiased and never count a row twice, every set of windows must lie in
# low...boundary without overlapping, and over all starts of the windows every id must be
# counted equally often (window times), so each id's chance to be counted is window / stretch.
class SqlSampleRangesTest < Minitest::Test
  SQL = Strata::Tiers::SQL
  WINDOW = SQL::Statements::SAMPLE_WINDOW
  WINDOWS = SQL::Statements::SAMPLE_WINDOWS

  # A Sizing with no database: sample_ranges uses nothing but its arguments and rand, which
  # each test fixes to one start at a time.
  def sampler(start = 0)
    SQL::Sizing.new(nil, nil, nil).tap { |sizing| sizing.define_singleton_method(:rand) { |_limit| start } }
  end

  def ranges(low, boundary, start: 0)
    binds, scale = sampler(start).sample_ranges(low, boundary)
    assert_equal WINDOWS * 4, binds.size, "a bind pair for every range of the statement"
    [binds.each_slice(2).reject { |from, below| from == below }, scale]
  end

  def test_few_enough_ids_are_counted_whole
    [[1, 1], [1, 2], [5, 5 + WINDOW * WINDOWS]].each do |low, boundary|
      counted, scale = ranges(low, boundary)
      assert_equal 1, scale
      assert_equal((boundary > low) ? [[low, boundary]] : [], counted)
    end
  end

  def test_every_id_below_the_boundary_is_counted_equally_often_and_never_twice
    [[1, WINDOW * WINDOWS + 1], [10, WINDOW * WINDOWS + 31], [7, 12_007], [3, 12_345]].each do |low, boundary|
      stretch = (boundary - low).fdiv(WINDOWS).ceil
      coverage = Array.new(boundary - low + 1, 0) # differences: +1 where a range starts, -1 past its end
      stretch.times do |start|
        counted, scale = ranges(low, boundary, start: start)
        assert_in_delta stretch.fdiv(WINDOW), scale, 1e-12
        counted.sort.each_cons(2) { |(_, below), (from, _)| assert_operator below, :<=, from, "ranges overlap" }
        counted.each do |from, below|
          assert_operator from, :>=, low
          assert_operator below, :<=, boundary
          coverage[from - low] += 1
          coverage[below - low] -= 1
        end
      end
      times = 0
      counts = coverage[0...-1].map { |step| times += step }
      assert_equal [WINDOW], counts.uniq, "ids #{low}...#{boundary}, stretch #{stretch}"
    end
  end
end
