# frozen_string_literal: true

require_relative "store_case"

class StrataStoreCountersTest < Strata::StoreCase
  def test_increment_starts_a_missing_counter_at_the_amount
    assert_equal 1, store.increment("hits")
    assert_equal 11, store.increment("hits", 10)
    assert_equal 100, store.increment("other", 100)
  end

  def test_decrement_starts_a_missing_counter_at_zero_and_never_goes_below
    assert_equal 0, store.decrement("stock")
    store.write("stock", 3, raw: true)

    assert_equal 1, store.decrement("stock", 2)
    assert_equal 0, store.decrement("stock", 5)
  end

  def test_a_raw_write_sets_a_counter
    store.write("hits", 5, raw: true)

    assert_equal 6, store.increment("hits")
    assert_equal 4, store.decrement("hits", 2)
  end

  def test_a_counter_reads_back_as_a_string_when_raw_and_as_an_integer_otherwise
    store.increment("hits", 7)

    assert_equal "7", store.read("hits", raw: true)
    assert_equal 7, store.read("hits")
    assert store.exist?("hits")
    assert_equal 7, store.fetch("hits") { flunk "the counter is present" }
  end

  def test_a_value_written_without_raw_is_not_a_counter
    store.write("plain", 5)

    assert_nil store.increment("plain")
    assert_equal 5, store.read("plain")
  end

  def test_a_raw_write_of_a_string_that_is_not_a_number_reads_back
    store.write("word", "hello", raw: true)

    assert_equal "hello", store.read("word", raw: true)
    assert_equal "hello", store.read("word")
    assert_nil store.increment("word")
  end

  def test_negative_amounts_run_the_other_way
    store.write("n", 10, raw: true)

    assert_equal 7, store.increment("n", -3)
    assert_equal 9, store.decrement("n", -2)
  end

  def test_expires_in_applies_to_a_counter_created_by_increment
    assert_equal 1, store.increment("short", 1, expires_in: 0.2)
    assert_equal 2, store.increment("short")
    assert_equal 1, store.increment("long")

    assert wait_until { store.read("short").nil? }, "the counter should have expired"
    assert_equal 1, store.read("long")
  end

  def test_counters_honour_the_namespace
    namespaced = build_store(namespace: "app")
    namespaced.increment("hits", 3)

    assert_nil store.read("hits")
    assert_equal 3, store.read("app:hits")
    assert_equal 3, namespaced.read("hits")
  end

  def test_increment_is_instrumented_with_the_amount
    events = capture_events("cache_increment.active_support") { store.increment("hits", 2) }

    assert_equal 1, events.size
    assert_equal "hits", events.first[:key]
    assert_equal 2, events.first[:amount]
  end
end
