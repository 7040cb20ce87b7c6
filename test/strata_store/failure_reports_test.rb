# frozen_string_literal: true

require "test_helper"
require "active_support/cache/strata_store"

# What StrataStore tells of its failures, and when (FailureReports): once per outage of a kind,
# on a clock the test moves.
class StrataStoreFailureReportsTest < Minitest::Test
  Reports = Strata::FailureReports

  # A TierError that names its server, as the memcached client's do.
  class ServerError < Strata::TierError
    attr_reader :server

    def initialize(server)
      super("#{server} is down", tier: :l2)
      @server = server
    end
  end

  def setup
    @now = 0.0
    @reports = Reports.new(interval: 60, clock: -> { @now })
  end

  def test_an_outage_is_told_once_an_interval_with_the_count_held_back
    assert_equal 0, @reports.record(ServerError.new("a:1"), :l2)
    3.times { assert_nil @reports.record(ServerError.new("a:1"), :l2) }

    @now += 61
    assert_equal 3, @reports.record(ServerError.new("a:1"), :l2), "told again, with the three held back"
    assert_nil @reports.record(ServerError.new("a:1"), :l2)

    stats = @reports.stats
    assert_equal({"StrataStoreFailureReportsTest::ServerError" => 6}, stats[:failures])
    assert_equal 4, stats[:unreported]
  end

  def test_each_tier_error_class_and_server_is_a_kind_of_its_own
    assert_equal 0, @reports.record(ServerError.new("a:1"), :l2)
    assert_equal 0, @reports.record(ServerError.new("b:2"), :l2)
    assert_equal 0, @reports.record(Strata::TierError.new("down", tier: :l2), :l2)
    assert_equal 0, @reports.record(Strata::TierError.new("down", tier: :l3), :l3)
    assert_nil @reports.record(Strata::TierError.new("down again", tier: :l3), :l3)
  end

  def test_a_value_too_large_for_a_tier_is_told_once_for_good_and_counted_per_tier
    too_large = Strata::ValueTooLargeError.new("too large")
    assert_equal 0, @reports.record(too_large, :l1)
    @now += 3600
    assert_nil @reports.record(too_large, :l1)
    assert_equal 0, @reports.record(too_large, :l3)

    assert_equal({l1: 2, l3: 1}, @reports.stats[:too_large])
  end
end
