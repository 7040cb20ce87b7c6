# frozen_string_literal: true

require_relative "store_case"

class StrataStoreLocalCacheTest < Strata::StoreCase
  def test_reads_inside_the_block_are_served_from_the_local_cache
    store.write("key", "first")

    store.with_local_cache do
      assert_equal "first", store.read("key")
      open_table.delete(tier_key(store, "key"))
      assert_equal "first", store.read("key"), "the second read must not reach the table"
    end
    assert_nil store.read("key")
  end

  def test_a_local_hit_is_tagged_with_the_local_store_and_no_tier
    store.write("key", "value")

    store.with_local_cache do
      store.read("key")
      events = capture_events("cache_read.active_support") { store.read("key") }

      assert_equal ActiveSupport::Cache::Strategy::LocalCache::LocalStore.name, events.first[:store]
      refute events.first.key?(:tier)
    end
  end

  def test_a_miss_is_remembered_for_the_block
    store.with_local_cache do
      assert_nil store.read("key")
      build_store.write("key", "written elsewhere")
      assert_nil store.read("key")
    end
  end

  # write_multi (fetch_multi's too) goes to the tiers in one call per tier, past the layer's
  # per-key hook: the local cache must not keep serving what it held before.
  def test_write_multi_updates_the_local_cache
    store.with_local_cache do
      store.write("key", "first")
      store.write("other", "first")
      store.write_multi("key" => "second", "other" => "second")

      assert_equal "second", store.read("key")
      assert_equal({"key" => "second", "other" => "second"}, store.read_multi("key", "other"))
    end
  end

  def test_writes_and_deletes_update_the_local_cache_and_the_table
    store.with_local_cache do
      store.write("key", "value")
      assert_equal "value", store.read("key")
      assert_equal "value", build_store.read("key")

      store.delete("key")
      assert_nil store.read("key")
      assert_nil build_store.read("key")
    end
  end

  # A large value is written to the table in two parts (Strata::Entry::Split) outside a local
  # cache block only: the local cache keeps the bytes it is given and reads them back.
  def test_a_large_value_written_inside_the_block_reads_back_locally_and_from_the_table
    value = "y" * 30_000
    store.with_local_cache do
      store.write("large", value)
      assert_equal value, store.read("large")
      assert_equal value, build_store.read("large")
    end
  end

  def test_values_from_the_local_cache_are_copies
    store.with_local_cache do
      store.write("key", "value")
      store.read("key") << " changed"

      assert_equal "value", store.read("key")
    end
  end

  def test_counters_inside_the_block_read_back_their_new_value
    store.with_local_cache do
      assert_equal 1, store.increment("hits")
      assert_equal 3, store.increment("hits", 2)
      assert_equal "3", store.read("hits", raw: true)
      assert_equal 2, store.decrement("hits")
      assert_equal 2, store.read("hits")
    end
  end

  def test_read_multi_combines_local_and_table_hits
    store.write("table", 2)

    store.with_local_cache do
      store.write("local", 1)
      assert_equal({"local" => 1, "table" => 2}, store.read_multi("local", "table", "missing"))
    end
  end

  def test_clear_empties_the_local_cache_too
    store.with_local_cache do
      store.write("key", "value")
      store.clear

      assert_nil store.read("key")
    end
  end
end
