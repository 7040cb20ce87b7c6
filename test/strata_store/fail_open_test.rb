# frozen_string_literal: true

require_relative "store_case"

# A failing tier turns into a miss or a false write, and the error reaches ActiveSupport.error_reporter.
class StrataStoreFailOpenTest < Strata::StoreCase
  def setup
    # A quick lock timeout keeps the failing writes short.
    @store = build_store(l1: {lock_timeout: 0.01})
  end

  # An L1 directory planted by someone else (here a symlink, as another local user could make
  # /dev/shm/strata-<uid> before the app): the app boots without L1, reported once, and serves
  # from the tiers left. L1 alone has nothing left to serve from: it raises.
  def test_an_unsafe_l1_location_leaves_the_store_without_l1_when_another_tier_serves
    real = File.join(@tmpdir, "real")
    Dir.mkdir(real, 0o700)
    File.symlink(real, File.join(@tmpdir, "planted"))
    l1 = {path: File.join(@tmpdir, "planted", "app.l1"), size: TABLE_SIZE}
    cache = nil
    reports = capture_reports { cache = build_store(l1: l1, sql: {path: File.join(@tmpdir, "cache.sqlite3")}) }
    assert_equal [Strata::UnsafeFileError], reports.map { |report| report[:error].class }
    assert_equal :l1, reports.first[:context][:tier]
    assert_equal [:l3], cache.stack.tier_names
    assert cache.write("k", "v")
    assert_equal "v", cache.read("k")
    assert_empty Dir.children(real), "nothing made through the link"

    assert_raises(Strata::UnsafeFileError) { build_store(l1: l1) }
  end

  def test_corrupt_bytes_in_the_table_read_as_a_miss_and_are_reported
    open_table.set(tier_key(store, "key"), "\xE1 not really an entry".b)

    reports = capture_reports { assert_nil store.read("key") }

    assert_equal 1, reports.size
    report = reports.first
    assert_kind_of Strata::CorruptError, report[:error]
    assert report[:handled]
    assert_equal :warning, report[:severity]
    assert_equal "strata.cache", report[:source]
  end

  def test_bytes_written_by_something_else_read_as_a_miss
    open_table.set(tier_key(store, "key"), "plain text from another program")

    reports = capture_reports { assert_nil store.read("key") }

    assert_kind_of Strata::CorruptError, reports.first[:error]
  end

  def test_fetch_recomputes_over_a_corrupt_entry
    open_table.set(tier_key(store, "key"), "\xE1\x00".b)

    capture_reports do
      assert_equal "fresh", store.fetch("key") { "fresh" }
    end
    assert_equal "fresh", store.read("key")
  end

  def test_read_multi_skips_a_corrupt_entry
    store.write("good", 1)
    open_table.set(tier_key(store, "bad"), "\xE1".b)

    reports = capture_reports { assert_equal({"good" => 1}, store.read_multi("good", "bad")) }

    assert_equal 1, reports.size
  end

  def test_a_write_the_table_cannot_take_returns_false
    store.write("key", "old")

    reports = with_shard_locked(open_table, tier_key(store, "key")) do
      captured = capture_reports { refute store.write("key", "new") }
      assert_nil store.read("key"), "not the old value"
      captured
    end

    assert_equal [:l1], reports.map { |report| report[:context][:tier] }.uniq
    assert_nil store.read("key"), "not the old value, also once the lock is free"
  end

  def test_a_counter_the_table_cannot_change_is_nil_and_reported_with_its_tier
    with_shard_locked(open_table, tier_key(store, "hits")) do
      reports = capture_reports { assert_nil store.increment("hits") }

      assert_kind_of Strata::RetryableError, reports.first[:error]
      assert_equal({tier: :l1}, reports.first[:context])
      assert_equal "strata.cache", reports.first[:source]
    end
  end

  # The table cannot take the shard lock, so it fences the key instead: a miss for every process.
  def test_a_delete_the_table_cannot_lock_still_deletes
    store.write("key", "value")

    with_shard_locked(open_table, tier_key(store, "key")) do
      reports = capture_reports { assert store.delete("key") }

      assert_empty reports
      assert_nil store.read("key")
      refute store.exist?("key")
    end
    assert_nil store.read("key")
  end

  def test_failures_are_counted
    open_table.set(tier_key(store, "key"), "\xE1".b)
    capture_reports { store.read("key") }

    assert_equal 1, store.stats[:failures]["Strata::CorruptError"]
  end
end
