# frozen_string_literal: true

require_relative "store_case"

class StrataStoreVersioningExpiryTest < Strata::StoreCase
  # A record-like key: a stable cache_key and a cache_version that changes on update.
  Record = Struct.new(:id, :cache_version) do
    def cache_key
      "records/#{id}"
    end
  end

  def test_a_version_mismatch_is_a_miss
    store.write("key", "value", version: "1")

    assert_equal "value", store.read("key", version: "1")
    assert_nil store.read("key", version: "2")
    refute store.exist?("key", version: "2")
  end

  def test_an_entry_without_a_version_matches_any_version
    store.write("key", "value")

    assert_equal "value", store.read("key", version: "1")
  end

  def test_an_empty_version_is_still_a_version
    store.write("key", "value", version: "")

    assert_nil store.read("key", version: "1")
  end

  def test_recyclable_keys_use_the_cache_version_of_the_key
    record = Record.new(1, "2024-01-01")
    store.write(record, "rendered")

    assert_equal "rendered", store.read(record)
    record.cache_version = "2024-01-02"
    assert_nil store.read(record)
    assert_equal "rerendered", store.fetch(record) { "rerendered" }
    assert_equal "rerendered", store.read(record)
  end

  def test_fetch_recomputes_on_a_version_mismatch
    store.write("key", "old", version: "1")

    assert_equal "new", store.fetch("key", version: "2") { "new" }
    assert_equal "new", store.read("key", version: "2")
  end

  def test_expires_in_turns_the_entry_into_a_miss
    store.write("key", "value", expires_in: 60)

    travel 59.seconds do
      assert_equal "value", store.read("key")
    end
    travel 61.seconds do
      assert_nil store.read("key")
      refute store.exist?("key")
    end
  end

  def test_a_store_wide_expires_in_applies_to_every_write
    cache = build_store(expires_in: 60)
    cache.write("key", "value")

    travel 61.seconds do
      assert_nil cache.read("key")
    end
  end

  def test_expires_at_sets_an_absolute_expiry
    store.write("key", "value", expires_at: 1.hour.from_now)

    travel 59.minutes do
      assert_equal "value", store.read("key")
    end
    travel 61.minutes do
      assert_nil store.read("key")
    end
  end

  def test_expires_in_and_expires_at_together_are_refused
    assert_raises(ArgumentError) { store.write("key", 1, expires_in: 1, expires_at: 1.hour.from_now) }
  end

  def test_the_table_itself_drops_an_expired_entry
    store.write("key", "value", expires_in: 0.2)
    table = open_table

    assert table.get(tier_key(store, "key"))
    assert wait_until { table.get(tier_key(store, "key")).nil? }, "the tier should expire the entry"
  end

  def test_an_entry_with_a_past_expiry_in_the_table_is_a_miss
    store.write("key", "value", expires_at: 1.second.from_now)

    travel 2.seconds do
      assert_nil store.read("key")
    end
  end

  def test_race_condition_ttl_serves_the_stale_value_to_others_while_one_recomputes
    store.write("key", "old", expires_in: 60)

    travel 65.seconds do
      inner = nil
      outer = store.fetch("key", race_condition_ttl: 10) do
        inner = store.fetch("key", race_condition_ttl: 10) { "computed by the second caller" }
        "new"
      end

      assert_equal "new", outer
      assert_equal "old", inner
      assert_equal "new", store.read("key")
    end
  end

  def test_race_condition_ttl_does_not_revive_an_entry_expired_longer_than_the_window
    store.write("key", "old", expires_in: 60)

    travel 100.seconds do
      assert_equal "new", store.fetch("key", race_condition_ttl: 10) { "new" }
    end
  end

  def test_race_condition_ttl_keeps_the_entry_in_the_table_past_its_expiry
    # raced first, and plain living longer: once plain's row is gone, raced's entry has surely
    # expired. (Written the other way round, on a loaded machine, raced outlived plain's row.)
    store.write("raced", "value", expires_in: 0.1, race_condition_ttl: 30)
    store.write("plain", "value", expires_in: 0.2)
    table = open_table

    assert wait_until { table.get(tier_key(store, "plain")).nil? }, "the plain entry should expire"
    assert table.get(tier_key(store, "raced")), "the stale entry must stay readable for the race window"
    assert_nil store.read("raced")
  end
end
