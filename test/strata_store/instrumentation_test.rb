# frozen_string_literal: true

require_relative "store_case"

class StrataStoreInstrumentationTest < Strata::StoreCase
  def test_a_read_hit_names_the_tier_that_answered
    store.write("key", "value")
    events = capture_events("cache_read.active_support") { store.read("key") }

    assert_equal 1, events.size
    assert_equal :l1, events.first[:tier]
    assert events.first[:hit]
    assert_equal "key", events.first[:key]
    assert_equal "ActiveSupport::Cache::StrataStore", events.first[:store]
  end

  def test_a_read_miss_names_no_tier
    events = capture_events("cache_read.active_support") { store.read("missing") }

    refute events.first[:hit]
    assert_nil events.first[:tier]
  end

  def test_fetch_tags_its_read_with_the_tier
    store.write("key", "value")
    events = capture_events("cache_read.active_support") { store.fetch("key") { "unused" } }

    assert_equal :l1, events.first[:tier]
    assert_equal :fetch, events.first[:super_operation]
  end

  def test_exist_tags_its_event_with_the_tier
    store.write("key", "value")
    events = capture_events("cache_exist?.active_support") { store.exist?("key") }

    assert_equal :l1, events.first[:tier]
  end

  def test_read_multi_tags_its_event_with_the_tier_and_the_hits
    store.write("a", 1)
    events = capture_events("cache_read_multi.active_support") { store.read_multi("a", "b") }

    assert_equal :l1, events.first[:tier]
    assert_equal ["a"], events.first[:hits]
  end

  def test_writes_and_deletes_are_instrumented
    writes = capture_events("cache_write.active_support") { store.write("key", 1) }
    deletes = capture_events("cache_delete.active_support") { store.delete("key") }

    assert_equal "ActiveSupport::Cache::StrataStore", writes.first[:store]
    assert_equal "ActiveSupport::Cache::StrataStore", deletes.first[:store]
  end

  def test_delete_matched_and_cleanup_are_instrumented
    matched = capture_events("cache_delete_matched.active_support") { store.delete_matched(/a/) }
    cleaned = capture_events("cache_cleanup.active_support") { store.cleanup }

    assert_equal 1, matched.size
    assert_equal 1, cleaned.size
  end
end
