# frozen_string_literal: true

require "test_helper"
require "ostruct"
require "strata/vm_watch/minitest"
require "strata/vm_watch/rspec"

# The test helpers: Strata::VMWatch::Minitest fails a test whose body invalidated the VM caches
# and names the line; Strata::VMWatch::RSpec raises for a block that did.
class VMWatchTestHelpersTest < Minitest::Test
  # OpenStruct.new gives its object a singleton class, which Ruby 3.1 counts (class_serial).
  # Ruby 3.2+ counts no class creation, so there the plant is an extend (global_cvar_state).
  PLANTED_AT = "#{__FILE__}:#{__LINE__ + 1}"
  PLANT = RubyVM.stat.key?(:class_serial) ? -> { OpenStruct.new(a: 1) } : -> { Object.new.extend(Comparable) }

  # A watched test class, run by hand: taken off Minitest's list so autorun does not run it.
  def watched_test_class(&body)
    klass = Class.new(Minitest::Test) do
      include Strata::VMWatch::Minitest

      def self.name
        "WatchedTest"
      end
    end
    klass.class_eval(&body)
    Minitest::Runnable.runnables.delete(klass)
    klass
  end

  def test_a_test_that_plants_an_invalidation_fails_naming_the_line
    klass = watched_test_class do
      define_method(:test_plant) { PLANT.call }
    end

    result = klass.new("test_plant").run

    failure = result.failures.fetch(0)
    assert_kind_of Minitest::Assertion, failure
    assert_includes failure.message, "WatchedTest#test_plant"
    assert_includes failure.message, PLANTED_AT
  end

  def test_a_clean_test_passes
    klass = watched_test_class do
      define_method(:test_clean) { assert_equal 2, [1, 1].sum }
    end

    result = klass.new("test_clean").run

    assert_empty result.failures
    assert_equal 1, result.assertions
  end

  def test_setup_may_warm_up_what_the_test_body_then_leaves_alone
    klass = watched_test_class do
      define_method(:setup) { @planted = PLANT.call }
      define_method(:test_uses_it) { refute_predicate @planted, :frozen? }
    end

    assert_empty klass.new("test_uses_it").run.failures
  end

  def test_assert_no_vm_cache_invalidation_fails_naming_the_line
    host = watched_test_class {}.new("unused")

    failure = assert_raises(Minitest::Assertion) { host.assert_no_vm_cache_invalidation { PLANT.call } }
    assert_includes failure.message, PLANTED_AT
    host.assert_no_vm_cache_invalidation { [1, 2].sum }
  end

  def test_rspec_helper_raises_naming_the_line_and_passes_a_clean_block_through
    host = Object.new.extend(Strata::VMWatch::RSpec)

    error = assert_raises(Strata::VMCacheInvalidated) { host.expect_no_vm_cache_invalidation { PLANT.call } }
    assert_includes error.message, PLANTED_AT
    assert_equal PLANTED_AT, error.report.sites.fetch(0).location
    assert_equal 3, host.expect_no_vm_cache_invalidation { [1, 2].sum }
  end

  def test_rspec_helper_outside_debug_mode_gives_the_counters
    host = Object.new.extend(Strata::VMWatch::RSpec)

    error = assert_raises(Strata::VMCacheInvalidated) { host.expect_no_vm_cache_invalidation(debug: false) { PLANT.call } }
    refute_empty error.report.deltas
    assert_empty error.report.sites
  end
end
