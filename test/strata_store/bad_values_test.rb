# frozen_string_literal: true

require_relative "store_case"

class StrataStoreBadValuesTest < Strata::StoreCase
  def test_a_value_that_cannot_be_serialized_raises_type_error_and_writes_nothing
    assert_raises(TypeError) { store.write("key", proc {}) }

    refute store.exist?("key")
  end

  def test_the_message_pack_serializer_refuses_a_proc_and_writes_nothing
    cache = build_store(serializer: :message_pack)

    assert_raises(ActiveSupport::MessagePack::UnserializableObjectError) { cache.write("key", proc {}) }
    refute cache.exist?("key")
  end

  def test_a_failed_serialization_leaves_the_old_value
    store.write("key", "old")

    assert_raises(TypeError) { store.write("key", [1, -> {}]) }
    assert_equal "old", store.read("key")
  end

  def test_fetch_with_a_block_returning_a_proc_raises_and_caches_nothing
    assert_raises(TypeError) { store.fetch("key") { proc {} } }

    refute store.exist?("key")
  end

  def test_write_multi_with_one_bad_value_writes_none
    assert_raises(TypeError) { store.write_multi("good" => 1, "bad" => proc {}) }

    assert_equal({}, store.read_multi("good", "bad"))
  end

  def test_a_value_too_large_for_the_table_is_not_written_and_is_reported
    store.write("key", "small")
    large = "x" * (open_table.max_value_size + 1)

    reports = capture_reports { refute store.write("key", large) }

    assert_nil store.read("key"), "the old value must not be served after a failed overwrite"
    assert_kind_of Strata::ValueTooLargeError, reports.first[:error]
    assert_equal "strata.cache", reports.first[:source]
    assert_equal 1, store.stats[:failures]["Strata::ValueTooLargeError"]
  end

  def test_a_value_too_large_leaves_the_rest_of_the_table_intact
    store.write("neighbour", "still here")
    capture_reports { store.write("key", "x" * 1_000_000) }

    assert_equal "still here", store.read("neighbour")
  end

  def test_fetch_returns_a_value_too_large_to_cache
    large = "x" * 1_000_000

    capture_reports do
      assert_equal large, store.fetch("key") { large }
    end
    refute store.exist?("key")
  end

  def test_a_value_whose_class_is_gone_is_a_miss
    store.write("key", Ghost.new(1))
    table = open_table
    key = tier_key(store, "key")
    table.set(key, table.get(key).sub("Ghost", "Ghozt")) # as if the class had been renamed since

    assert_nil store.read("key")
    assert_equal "recomputed", store.fetch("key") { "recomputed" }
  end

  Ghost = Struct.new(:value)
end
