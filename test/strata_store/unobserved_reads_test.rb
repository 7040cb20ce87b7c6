# frozen_string_literal: true

require_relative "store_case"
require "logger"
require "stringio"

# The unwatched hit and cold-miss paths must answer exactly as the instrumented base path does,
# and step aside whenever someone could tell the difference.
class StrataStoreUnobservedReadsTest < Strata::StoreCase
  def test_unwatched_hits_return_the_stored_values
    store.write("string", "text")
    store.write("object", {a: [1, 2]})
    store.write("nil", nil)

    assert_equal "text", store.read("string")
    assert_equal({a: [1, 2]}, store.fetch("object") { flunk "a hit must not run the block" })
    assert_nil store.fetch("nil") { flunk "a cached nil is a hit" }
    assert_equal "text", store.fetch("string", expires_in: 60) { flunk "a hit must not run the block" }
  end

  def test_a_hit_is_instrumented_as_soon_as_someone_subscribes
    store.write("key", "value")
    store.read("key")

    reads = capture_events("cache_read.active_support") { store.read("key") }
    fetch_hits = capture_events("cache_fetch_hit.active_support") { store.fetch("key") { "unused" } }

    assert_equal [:l1], reads.map { |payload| payload[:tier] }
    assert_equal ["key"], fetch_hits.map { |payload| payload[:key] }
  end

  # L1 alone: a key it lacks is nil at once, counted as one miss, and a subscriber still gets
  # the base path's event.
  def test_an_unwatched_miss_of_l1_alone_is_nil_and_one_miss
    misses = -> { store.stats[:counters][:tiers][:l1][:misses] }
    before = misses.call

    assert_nil store.read("absent")
    assert_equal before + 1, misses.call, "the host counters count the app's read once"

    reads = capture_events("cache_read.active_support") { store.read("absent") }
    assert_equal [false], reads.map { |payload| payload[:hit] }
  end

  # A stale stamped copy is not a miss to skip: the read drops it, and says nil.
  def test_an_unwatched_read_of_a_stale_copy_is_nil_and_drops_it
    store.write("tagged", "old", tags: "bugs/1")
    store.invalidate_tags("bugs/1")

    assert_nil store.read("tagged")
    assert_nil store.stack[:l1].get(store.send(:normalize_key, "tagged", nil)), "dropped"
  end

  def test_a_debug_logger_sees_every_read
    output = StringIO.new
    store.write("key", "value")
    with_cache_logger(Logger.new(output, level: :debug)) { store.read("key") }

    assert_match(/Cache read: key/, output.string)
  end

  def test_versions_and_namespaces_are_honoured
    store.write("key", "v1", version: 1)
    store.write("key", "elsewhere", namespace: "other")

    assert_equal "v1", store.read("key", version: 1)
    assert_nil store.read("key", version: 2)
    assert_equal "elsewhere", store.read("key", namespace: "other")
    assert_equal "recomputed", store.fetch("key", version: 2) { "recomputed" }
  end

  def test_expired_entries_take_the_base_path
    store.write("key", "old", expires_in: 60)
    travel 61 do
      assert_nil store.read("key")
      assert_equal "new", store.fetch("key") { "new" }
    end
  end

  # A fetch given only tags: probes with the store's own options (namespace, expires_in) and
  # merges the tags in when it misses: the entry it writes carries them.
  def test_a_fetch_given_only_tags_uses_the_stores_options
    tagged = build_store(namespace: "ns", expires_in: 60)
    tagged.write("key", "stored", tags: ["bugs/1"])

    assert_equal "stored", tagged.fetch("key", tags: ["bugs/1"]) { flunk "a hit must not run the block" }
    assert_equal "computed", tagged.fetch("other", tags: ["bugs/2"]) { "computed" }
    assert_equal "computed", tagged.read("other")
    assert_nil store.read("other"), "written under the store's namespace"
    tagged.invalidate_tags("bugs/2")

    assert_nil tagged.read("other"), "written with its tags"
    travel 61 do
      assert_nil tagged.read("key"), "written with the store's expires_in"
      assert_equal "fresh", tagged.fetch("key", tags: ["bugs/1"]) { "fresh" }
    end
    assert_equal "forced", tagged.fetch("key", tags: ["bugs/1"], force: true) { "forced" }
  end

  def test_force_always_runs_the_block
    store.write("key", "cached")

    assert_equal "forced", store.fetch("key", force: true) { "forced" }
    assert_equal "forced", store.read("key")
  end

  def test_hits_go_through_an_active_local_cache
    store.write("key", "value")
    store.with_local_cache do
      assert_equal "value", store.read("key")
      open_table.delete(tier_key(store, "key"))
      assert_equal "value", store.fetch("key") { flunk "the local cache holds the value" }
    end
  end

  def test_corrupt_bytes_are_reported_once_and_read_as_a_miss
    open_table.set(tier_key(store, "key"), "\xE1 not an entry".b)

    reports = capture_reports { assert_nil store.read("key") }

    assert_equal 1, reports.size
    assert_kind_of Strata::CorruptError, reports.first[:error]
  end

  def test_a_cold_fetch_runs_the_block_once_and_writes_what_it_returns
    %w[read generate write].each do |event| # else these tests would not reach the unwatched path
      refute ActiveSupport::Notifications.notifier.listening?("cache_#{event}.active_support")
    end
    calls = 0
    block = proc do
      calls += 1
      "computed"
    end
    assert_equal "computed", store.fetch("cold", &block)
    assert_equal "computed", store.fetch("cold") { flunk "the value was written" }
    assert_equal 1, calls
    assert_equal "computed", store.read("cold")
  end

  def test_a_cold_fetch_takes_write_options_from_its_block
    assert_equal "short", store.fetch("cold", expires_in: 600) { |_name, options|
      options.expires_in = 60
      "short"
    }
    assert_equal "until", store.fetch("dated", expires_in: 600) { |_name, options|
      options.expires_at = 30.seconds.from_now
      "until"
    }
    assert_equal "v2", store.fetch("versioned") { |_name, options|
      options.version = 2
      "v2"
    }

    assert_equal "v2", store.read("versioned", version: 2)
    assert_nil store.read("versioned", version: 1)
    travel 31 do
      assert_nil store.read("dated")
      assert_equal "short", store.read("cold")
    end
    travel 61 do
      assert_nil store.read("cold")
    end
  end

  def test_a_cold_fetch_honours_skip_nil_and_versions
    assert_nil store.fetch("nothing", skip_nil: true) { nil }
    refute store.exist?("nothing")

    store.fetch("versioned", version: 3) { "v3" }
    assert_equal "v3", store.read("versioned", version: 3)
    assert_nil store.read("versioned", version: 4)
  end

  def test_a_block_that_raises_in_a_cold_fetch_writes_nothing
    assert_raises(ZeroDivisionError) { store.fetch("cold") { 1 / 0 } }

    refute store.exist?("cold")
    assert_equal "second", store.fetch("cold") { "second" }
  end

  def test_a_cold_fetch_emits_its_write_and_takes_the_base_path_for_a_generate_subscriber
    # Rails 7.1 names the events' key as given, 7.2 as normalized.
    writes = capture_events("cache_write.active_support") { store.fetch("cold") { "value" } }
    assert_equal 1, writes.size
    assert_match(/cold\z/, writes.first[:key])

    generates = capture_events("cache_generate.active_support") { store.fetch("other") { "value" } }
    assert_equal 1, generates.size
    assert_match(/other\z/, generates.first[:key])
    assert_equal "value", store.read("other")
  end

  private

  def with_cache_logger(logger)
    previous = ActiveSupport::Cache::Store.logger
    ActiveSupport::Cache::Store.logger = logger
    yield
  ensure
    ActiveSupport::Cache::Store.logger = previous
  end
end
