# frozen_string_literal: true

require_relative "store_case"
require_relative "layout_stores"

# fail_safe: in every layout: a fetch whose block raises answers the last good value (its entry
# expired at most fail_safe ago), reports the error once per key and error class, and runs the
# block for that key again only after fail_safe_throttle. The fallback is never a value the app
# wrote over, deleted or invalidated since. Expiry is moved with Rails' time helpers; the tiers'
# own TTLs run on the real clock, and an entry written with fail_safe outlives its expiry there.
class StrataStoreFailSafeTest < Strata::StoreCase
  include Strata::LayoutStores

  class DatabaseDown < StandardError; end
  class Timeout < StandardError; end

  LAYOUTS.each do |name, tiers|
    define_method(:"test_#{name}_a_block_that_raises_answers_the_last_good_value") do
      cache = layout_store(tiers)
      assert_equal "good", cache.fetch("page", expires_in: 60, fail_safe: 3600) { "good" }

      travel 120.seconds do
        reports = capture_reports do
          value = cache.fetch("page", expires_in: 60, fail_safe: 3600) { raise DatabaseDown, "connection refused" }
          assert_equal "good", value
          # Throttled: the block is not run again, and nothing new is reported.
          assert_equal "good", cache.fetch("page", expires_in: 60, fail_safe: 3600) { flunk "ran inside the throttle" }
        end
        assert_equal [DatabaseDown], reports.map { |report| report[:error].class }
        assert_equal({key: tier_key(cache, "page"), fail_safe: true}, reports.first[:context])
        assert_equal "strata.cache", reports.first[:source]
        assert_nil cache.read("page"), "a read still finds it expired"
        assert_equal 2, cache.stats[:counters][:store][:stale_hits]
      end
    end

    define_method(:"test_#{name}_a_write_or_a_delete_after_the_failure_wins") do
      cache = layout_store(tiers)
      cache.fetch("written", expires_in: 60, fail_safe: 3600) { "good" }
      cache.fetch("deleted", expires_in: 60, fail_safe: 3600) { "good" }

      travel 120.seconds do
        capture_reports do
          %w[written deleted].each do |key|
            assert_equal "good", cache.fetch(key, expires_in: 60, fail_safe: 3600, fail_safe_throttle: 600) { raise DatabaseDown }
          end
        end
        cache.write("written", "newer")
        cache.delete("deleted")

        assert_equal "newer", cache.fetch("written", expires_in: 60, fail_safe: 3600) { raise DatabaseDown }
        assert_raises(DatabaseDown) { cache.fetch("deleted", expires_in: 60, fail_safe: 3600) { raise DatabaseDown } }
      end
    end

    define_method(:"test_#{name}_fetch_multi_answers_the_last_good_value_of_each_failed_name") do
      cache = layout_store(tiers)
      cache.write_multi({"a" => "good a", "b" => "good b"}, expires_in: 60, fail_safe: 3600)
      cache.write("fresh", "live", expires_in: 600)

      travel 120.seconds do
        computed = []
        reports = capture_reports do
          values = cache.fetch_multi("a", "b", "fresh", "new", expires_in: 60, fail_safe: 3600) do |key|
            computed << key
            raise DatabaseDown if key == "a"

            "computed #{key}"
          end
          assert_equal({"a" => "good a", "b" => "computed b", "fresh" => "live", "new" => "computed new"}, values)
        end
        assert_equal %w[a b new], computed
        assert_equal [DatabaseDown], reports.map { |report| report[:error].class }
        assert_equal "computed b", cache.read("b")
        assert_nil cache.read("a", fail_safe: 3600), "the last good value is not written back"
        assert_equal({"a" => "good a"}, cache.fetch_multi("a", expires_in: 60, fail_safe: 3600) { flunk "ran inside the throttle" })
        assert_raises(DatabaseDown) { cache.fetch_multi("new2", fail_safe: 3600) { raise DatabaseDown } }
      end
    end

    define_method(:"test_#{name}_nothing_past_fail_safe_nor_invalidated") do
      cache = layout_store(tiers)
      cache.fetch("old", expires_in: 60, fail_safe: 100) { "good" }
      cache.fetch("tagged", expires_in: 60, fail_safe: 3600, tags: ["bugs/1"]) { "good" }
      cache.invalidate_tags("bugs/1")

      travel 200.seconds do
        assert_raises(DatabaseDown) { cache.fetch("old", expires_in: 60, fail_safe: 100) { raise DatabaseDown } }
        assert_raises(DatabaseDown) { cache.fetch("tagged", expires_in: 60, fail_safe: 3600, tags: ["bugs/1"]) { raise DatabaseDown } }
      end
    end
  end

  def test_what_is_built_around_a_fallback_is_not_cached
    cache = layout_store(%i[l1], fail_safe: 3600)
    cache.fetch("part", expires_in: 60, tags: ["parts/1"]) { "good part" }
    cache.fetch("other part", expires_in: 60) { "good other" }

    travel 120.seconds do
      capture_reports do
        page = cache.fetch("page", expires_in: 60, tags: ["pages/1"]) do
          "[#{cache.fetch("part", expires_in: 60) { raise DatabaseDown }}]"
        end
        assert_equal "[good part]", page
        list = cache.fetch("list", expires_in: 60) do
          cache.fetch_multi("other part", "new part", expires_in: 60) { |key| (key == "new part") ? "new" : raise(DatabaseDown) }.values.join(",")
        end
        assert_equal "good other,new", list
        throttled = cache.fetch("page 2", expires_in: 60) { cache.fetch("part", expires_in: 60) { flunk "throttled" } }
        assert_equal "good part", throttled
      end
      assert_nil cache.read("page")
      assert_nil cache.read("list")
      assert_nil cache.read("page 2")
      assert_equal "new", cache.read("new part"), "fetch_multi writes what it computed"
    end
  end

  def test_each_error_class_is_reported_once_per_key_until_the_block_runs_through
    cache = layout_store(%i[l1], fail_safe: 3600, fail_safe_throttle: 0.05)
    cache.fetch("page", expires_in: 60) { "good" }

    travel 120.seconds do
      failures = [DatabaseDown, DatabaseDown, Timeout, DatabaseDown]
      reports = capture_reports do
        failures.each do |failure|
          wait_until { ran_block?(cache, "page") { raise failure } }
        end
        assert wait_until { cache.fetch("page", expires_in: 60) { "fresh" } == "fresh" }, "runs once the throttle lapsed"
      end
      assert_equal [DatabaseDown, Timeout], reports.map { |report| report[:error].class }
      assert_equal "fresh", cache.read("page")
    end

    travel 240.seconds do
      reports = capture_reports { wait_until { ran_block?(cache, "page", "fresh") { raise DatabaseDown } } }
      assert_equal [DatabaseDown], reports.map { |report| report[:error].class }, "reported again once the block had run through"
    end
  end

  def test_a_store_option_keeps_expired_entries_from_reads
    cache = layout_store(%i[l1 sql], fail_safe: 3600)
    cache.write("page", "good", expires_in: 60)

    travel 120.seconds do
      assert_nil cache.read("page")
      assert_nil cache.read_multi("page")["page"]
      assert_equal "good", cache.fetch("page") { raise DatabaseDown }
    end
  end

  def test_a_read_without_fail_safe_deletes_the_expired_entry_as_in_rails
    cache = layout_store(%i[l1])
    cache.write("page", "good", expires_in: 60, fail_safe: 3600)

    travel 120.seconds do
      assert_nil cache.read("page")
      assert_raises(DatabaseDown) { cache.fetch("page", fail_safe: 3600) { raise DatabaseDown } }
    end
  end

  def test_bad_values_are_refused_naming_the_option
    error = assert_raises(ArgumentError) { layout_store(%i[l1], fail_safe: -1) }
    assert_match(/fail_safe must be a number of seconds > 0/, error.message)
    error = assert_raises(ArgumentError) { layout_store(%i[l1], fail_safe_throttle: "soon") }
    assert_match(/fail_safe_throttle must be/, error.message)

    cache = layout_store(%i[l1])
    cache.write("page", "good")
    error = assert_raises(ArgumentError) { cache.fetch("page", fail_safe: Float::NAN) { "x" } }
    assert_match(/fail_safe must be/, error.message)
    assert_equal "good", cache.fetch("page", fail_safe: false) { "x" }, "false turns it off"
  end

  private

  # Whether a fetch of key ran its block (which raised, and the last good value came back)
  # rather than answering inside the throttle.
  def ran_block?(cache, key, last_good = "good", &block)
    ran = false
    value = cache.fetch(key, expires_in: 60) do
      ran = true
      block.call
    end
    assert_equal last_good, value
    ran
  end
end
