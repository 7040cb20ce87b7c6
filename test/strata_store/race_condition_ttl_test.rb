# frozen_string_literal: true

require_relative "store_case"
require_relative "layout_stores"
require "logger"

# race_condition_ttl in every layout: once an entry has expired, the first fetch within the
# window puts the stale entry back and recomputes; whoever reads the key meanwhile (the block
# itself, another thread, another host) gets the stale value, as with MemoryStore. Under the
# stubbed clock of Rails' time helpers and in real time, through the instrumented path (a debug
# logger) and the unobserved one.
class StrataStoreRaceConditionTtlTest < Strata::StoreCase
  include Strata::LayoutStores

  LAYOUTS = {
    l1: %i[l1],
    memcached: %i[memcached],
    l1_memcached: %i[l1 memcached],
    l1_memcached_sql: %i[l1 memcached sql]
  }.freeze

  LAYOUTS.each do |name, tiers|
    define_method(:"test_#{name}_the_block_reads_the_stale_value_under_a_stubbed_clock") do
      [nil, Logger.new(File::NULL, level: :debug)].each do |logger|
        cache = layout_store(tiers, logger: logger)
        cache.write("key", "old", expires_in: 60)

        travel 61.seconds do
          inside = :unread
          value = cache.fetch("key", race_condition_ttl: 10) do
            inside = cache.read("key")
            "new"
          end

          assert_equal "new", value
          assert_equal "old", inside, "the stale entry is served while one caller recomputes (logger: #{logger.inspect})"
          assert_equal "new", cache.read("key")
        end
      end
    end

    define_method(:"test_#{name}_a_block_that_raises_leaves_the_stale_value_for_the_window") do
      cache = layout_store(tiers, logger: Logger.new(File::NULL, level: :debug))
      cache.write("key", "old", expires_in: 60)

      travel 61.seconds do
        assert_raises(ArgumentError) do
          cache.fetch("key", race_condition_ttl: 10) do
            assert_equal "old", cache.read("key")
            raise ArgumentError
          end
        end
        assert_equal "old", cache.read("key")
      end
      travel 91.seconds do
        assert_nil cache.read("key")
      end
    end

    define_method(:"test_#{name}_others_read_and_fetch_the_stale_value_in_real_time") do
      cache = layout_store(tiers)
      other_host = layout_store(tiers, l1_path: File.join(@tmpdir, "other-host.l1")) if tiers.include?(:memcached)
      cache.write("key", "old", expires_in: 0.2, race_condition_ttl: 10)
      # No earlier than the entry's own: the write read the clock before, and the entry keeps it
      # in whole milliseconds, rounded up (Strata::Entry.milliseconds).
      expires_at = Time.now.to_f + 0.201
      # Not by reading: a read of an expired entry deletes it, in Rails' stores as here.
      wait_until { Time.now.to_f > expires_at }

      seen = nil
      value = cache.fetch("key", race_condition_ttl: 10) do
        seen = [cache.read("key")]
        seen += Thread.new do
          [cache.read("key"), cache.fetch("key") { "computed by another thread" },
            other_host&.fetch("key") { "computed by another host" }]
        end.value
        "new"
      end

      assert_equal "new", value
      expected = ["old", "old", "old"]
      expected << (other_host && "old")
      assert_equal expected, seen
      assert_equal "new", cache.read("key")
    end
  end

  LAYOUTS.each do |name, tiers|
    # The put-back copy is a stale value: whoever is served it while the fetch recomputes (the
    # block, another thread, another host) counts a stale hit, and its cache_read and
    # cache_fetch_hit say stale: true; observed or not. The new value is a plain hit again.
    define_method(:"test_#{name}_the_put_back_copy_is_counted_and_reported_as_a_stale_hit") do
      cache = layout_store(tiers)
      other_host = layout_store(tiers, l1_path: File.join(@tmpdir, "other-host.l1")) if tiers.include?(:memcached)
      cache.write("key", "old", expires_in: 60)

      travel 61.seconds do
        reads = fetch_hits = nil
        value = cache.fetch("key", race_condition_ttl: 10) do
          assert_equal "old", cache.read("key"), "unobserved"
          assert_equal 1, stale_hits(cache)
          fetch_hits = capture_events("cache_fetch_hit.active_support") do
            reads = capture_events("cache_read.active_support") do
              assert_equal "old", cache.read("key")
              assert_equal "old", Thread.new { cache.fetch("key") { "computed by another thread" } }.value
              assert_equal "old", other_host.fetch("key") { "computed by another host" } if other_host
            end
          end
          "new"
        end

        assert_equal "new", value
        assert_equal [true] * (other_host ? 3 : 2), reads.map { |payload| payload[:stale] }
        assert_equal [true] * (other_host ? 2 : 1), fetch_hits.map { |payload| payload[:stale] }
        assert_equal 3, stale_hits(cache)
        assert_equal 1, stale_hits(other_host) if other_host

        reads = capture_events("cache_read.active_support") { assert_equal "new", cache.fetch("key") { flunk } }
        refute reads.first.key?(:stale)
        assert_equal 3, stale_hits(cache)
      end
    end
  end

  # An entry written with race_condition_ttl, but not put back, is no stale hit while it lives.
  def test_an_entry_written_with_race_condition_ttl_is_a_plain_hit
    cache = layout_store(LAYOUTS[:l1_memcached])
    cache.write("key", "old", expires_in: 60, race_condition_ttl: 10)

    reads = capture_events("cache_read.active_support") { assert_equal "old", cache.fetch("key", race_condition_ttl: 10) { flunk } }
    refute reads.first.key?(:stale)
    assert_equal 0, stale_hits(cache)
  end

  # L1 and memcached lost the entry (evicted, restarted) while the SQL tier keeps it through the
  # window: the fetch wins memcached's lease and finds the stale entry below. Putting it back and
  # then writing the new value must not be refused as a fill over a value stored since.
  def test_a_stale_entry_only_the_sql_tier_still_holds_is_put_back_and_replaced
    cache = layout_store(LAYOUTS[:l1_memcached_sql])
    cache.write("key", "old", expires_in: 0.2, race_condition_ttl: 10)
    expires_at = Time.now.to_f + 0.201 # no earlier than the entry's own (in milliseconds, rounded up)
    key = tier_key(cache, "key")
    cache.stack[:l1].delete(key)
    cache.stack[:l2].delete(key)
    wait_until { Time.now.to_f > expires_at }

    seen = nil
    value = cache.fetch("key", race_condition_ttl: 10) do
      seen = [cache.read("key"), Thread.new { cache.fetch("key") { "computed by another thread" } }.value]
      "new"
    end

    assert_equal "new", value
    assert_equal ["old", "old"], seen
    assert_equal "new", cache.read("key")
    assert_equal({}, cache.stats[:failures])
  end

  private

  def stale_hits(cache)
    cache.stats[:counters][:store][:stale_hits]
  end
end
