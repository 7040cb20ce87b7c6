# frozen_string_literal: true

require "test_helper"
require "strata/vm_watch"

# Which counters the watch reads: this Ruby's RubyVM.stat keys, by presence, minus the
# informational ones.
class VMWatchCountersTest < Minitest::Test
  Counters = Strata::VMWatch::Counters

  def test_the_keys_are_this_rubys_integer_counters_without_the_informational_ones
    expected = RubyVM.stat.select { |_, value| value.is_a?(Integer) }.keys - Counters::INFORMATIONAL

    assert_equal expected, Counters::KEYS
    refute_empty Counters::KEYS
    assert_empty Counters::KEYS & Counters::INFORMATIONAL
  end

  def test_delta_names_only_the_counters_that_moved
    before = Counters.read
    after = before.dup
    after[-1] += 3

    assert_equal({}, Counters.delta(before, before))
    assert_equal({Counters::KEYS.last => 3}, Counters.delta(before, after))
  end

  def test_extending_an_object_moves_a_counter
    before = Counters.read
    Object.new.extend(Comparable)

    refute_empty Counters.delta(before, Counters.read)
  end
end
