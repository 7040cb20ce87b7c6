# frozen_string_literal: true

require_relative "store_case"

class StrataStoreDeleteMatchedCleanupClearTest < Strata::StoreCase
  def test_delete_matched_removes_only_matching_keys
    store.write("views/1", 1)
    store.write("views/2", 2)
    store.write("models/1", 3)

    assert_equal 2, store.delete_matched(%r{^views/})
    assert_equal({"models/1" => 3}, store.read_multi("views/1", "views/2", "models/1"))
  end

  def test_delete_matched_matches_the_key_without_the_namespace
    cache = build_store(namespace: "app")
    other = build_store(namespace: "other")
    cache.write("views/1", 1)
    cache.write("models/views", 2)
    other.write("views/1", 3)

    cache.delete_matched(/^views/)

    assert_nil cache.read("views/1")
    assert_equal 2, cache.read("models/views")
    assert_equal 3, other.read("views/1")
  end

  def test_an_unanchored_pattern_matches_anywhere_in_the_key
    cache = build_store(namespace: "app")
    cache.write("a/target/b", 1)
    cache.write("other", 2)

    cache.delete_matched(/target/)

    assert_nil cache.read("a/target/b")
    assert_equal 2, cache.read("other")
  end

  def test_delete_matched_handles_utf8_and_binary_keys
    store.write("café/1", 1)
    store.write("\xFF\xFE".b, 2)

    assert_equal 1, store.delete_matched(/café/)
    assert_nil store.read("café/1")
    assert_equal 2, store.read("\xFF\xFE".b)
  end

  def test_cleanup_removes_expired_entries_and_counts_them
    store.write("short", 1, expires_in: 0.05)
    store.write("long", 2, expires_in: 60)

    assert wait_until { store.cleanup == 1 }
    assert_equal 2, store.read("long")
    assert_equal 0, store.cleanup
  end

  def test_clear_empties_the_table_for_every_store_on_it
    other = build_store
    store.write("a", 1)
    other.write("b", 2)

    assert store.clear
    assert_nil other.read("a")
    assert_nil store.read("b")
  end
end
