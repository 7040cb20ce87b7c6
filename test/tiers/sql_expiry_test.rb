# frozen_string_literal: true

require "test_helper"
require "strata/tiers/sql"

# Tiers::SQL::Expiry alone: which rows of the FIFO's front one pass deletes.
class SqlExpiryTest < Minitest::Test
  NOW = 1_000_000

  def expiry(max_size: nil, max_entries: nil, max_age: nil)
    Strata::Tiers::SQL::Expiry.new(max_size: max_size, max_entries: max_entries, max_age: max_age)
  end

  # [id, byte_size, expires_at, created_at]
  def row(id, byte_size: 10, expires_at: 0, created_at: NOW - 1)
    [id, byte_size, expires_at, created_at]
  end

  def test_expired_rows_go_wherever_they_are_in_the_batch
    head = [row(1), row(2, expires_at: NOW), row(3), row(4, expires_at: NOW - 5), row(5, expires_at: NOW + 1)]
    victims = expiry.victims(head, 0, 0, NOW)

    assert_equal [2, 4], victims.ids
    assert_equal 2, victims.expired
    assert_equal 0, victims.evicted
  end

  def test_over_budget_takes_the_oldest_until_the_table_fits
    head = (1..10).map { |id| row(id, byte_size: 100) }
    victims = expiry(max_size: 1_000).victims(head, 13, 1_250, NOW)

    assert_equal [1, 2, 3], victims.ids, "1250 - 300 fits under 1000"
    assert_equal 3, victims.evicted
  end

  def test_an_expired_row_counts_toward_the_budget
    head = [row(1), row(2, expires_at: 1), row(3), row(4)]
    victims = expiry(max_entries: 2).victims(head, 4, 40, NOW)

    assert_equal [1, 2], victims.ids, "row 1 evicted, row 2 expired: two left"
    assert_equal [1, 1], [victims.evicted, victims.expired]
  end

  def test_max_age_counts_from_the_last_write
    aged = NOW - 60_001
    head = [row(1, created_at: aged), row(2, created_at: NOW - 60_000), row(3, created_at: aged)]
    victims = expiry(max_age: 60).victims(head, 0, 0, NOW)

    assert_equal [1, 3], victims.ids
    assert_equal NOW - 60_000, expiry(max_age: 60).written_before(NOW)
    assert_nil expiry.written_before(NOW)
  end

  def test_a_pass_never_deletes_more_than_the_batch_it_was_given
    head = (1..5).map { |id| row(id, expires_at: 1) }
    assert_equal 5, expiry(max_entries: 1).victims(head, 1_000, 0, NOW).ids.size
    refute_predicate expiry, :budgeted?
    assert_predicate expiry(max_size: 1), :budgeted?
  end

  def test_upper_bounds_within_every_bound_are_within_budget
    assert expiry(max_size: 100, max_entries: 10).within_budget?(10, 100)
    refute expiry(max_size: 100, max_entries: 10).within_budget?(11, 100), "more rows than max_entries"
    refute expiry(max_size: 100, max_entries: 10).within_budget?(10, 101), "more bytes than max_size"
    assert expiry(max_entries: 10).within_budget?(10, nil), "no max_size: bytes don't matter"
  end

  def test_unknown_bytes_are_not_within_a_max_size
    refute expiry(max_size: 100).within_budget?(1, nil)
  end
end
