# frozen_string_literal: true

require "test_helper"
require "strata/tier_list"
require "strata/tier"

# Strata::TierList: the one place a tier's failure is handled, for the stack, the read-through
# and the tag versions alike.
class TierListTest < Minitest::Test
  # A tier whose every call fails, counted in the "sql" row.
  class FailingTier
    include Strata::Tier

    def initialize(error)
      @error = error
    end

    def counter_row
      "sql"
    end

    def count_in(row)
      @row = row
    end

    attr_reader :row

    def delete(_key)
      raise @error
    end
  end

  # A tier that answers, with the host capability.
  class HostTier
    include Strata::Tier

    CAPABILITIES = Strata::Tier::CAPABILITIES.merge(host: true, counters: true).freeze

    def capabilities
      CAPABILITIES
    end

    def delete(_key)
      true
    end
  end

  def setup
    @reports = []
    @counters = Strata::Counters.new
    @failing = FailingTier.new(Strata::TierError.new("down"))
    @list = Strata::TierList.new({l1: HostTier.new, sql: @failing},
      on_error: ->(error, name) { @reports << [error.message, name] }, counters: @counters)
  end

  def test_a_failure_is_counted_named_in_the_info_and_reported_once
    info = {}
    assert_nil @list.failed(Strata::TierError.new("timed out"), 1, info)

    assert_equal [:sql], info[:failed_tiers]
    assert_equal [["timed out", :sql]], @reports
    assert_equal 1, @counters.flat_totals["sql.errors_other"] + @counters.flat_totals["sql.errors_timeout"]
    assert_kind_of Strata::Counters::Row, @failing.row, "the tier was handed its row"
  end

  def test_safely_gives_the_fallback_when_the_tier_raises
    assert_equal :kept, @list.safely(1, nil, :kept) { @failing.delete("k") }
    assert_equal 42, @list.safely(0) { 42 }
    assert_equal [["down", :sql]], @reports
  end

  def test_safely_lets_other_errors_through
    assert_raises(ArgumentError) { @list.safely(1) { raise ArgumentError, "a bug, not a tier" } }
    assert_empty @reports
  end

  def test_drop_reports_instead_of_raising
    assert @list.drop("k", 0)
    assert_nil @list.drop("k", 1)
    assert_equal [["down", :sql]], @reports
  end

  def test_capabilities_are_read_from_the_declarations
    assert_equal 0, @list.index_of(:host)
    assert_nil @list.index_of(:leases)
    assert_equal [true, false], @list.capable(:counters)
    assert_equal %i[l1 sql], @list.names
    assert_equal 2, @list.size
    assert_predicate @list, :frozen?
  end

  def test_a_list_needs_a_tier
    assert_raises(ArgumentError) { Strata::TierList.new({}) }
  end
end
