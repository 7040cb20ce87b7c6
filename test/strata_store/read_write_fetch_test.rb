# frozen_string_literal: true

require_relative "store_case"

class StrataStoreReadWriteFetchTest < Strata::StoreCase
  Point = Struct.new(:x, :y)

  def test_a_written_value_reads_back
    assert store.write("greeting", "hello")
    assert_equal "hello", store.read("greeting")
  end

  def test_a_missing_key_reads_as_nil
    assert_nil store.read("nothing here")
    refute store.exist?("nothing here")
  end

  def test_values_of_every_common_type_round_trip
    values = {
      "string" => "text", "integer" => 42, "float" => 1.5, "true" => true, "false" => false,
      "array" => [1, "two", :three], "hash" => {"a" => 1, "b" => [2]}, "struct" => Point.new(1, 2),
      "time" => Time.at(1_700_000_000, 5, :usec), "big" => 2**80
    }
    values.each { |name, value| store.write(name, value) }

    values.each { |name, value| assert_equal value, store.read(name), name }
  end

  def test_strings_keep_their_encoding
    store.write("utf8", "Grüße")
    store.write("binary", "\xFF\x00".b)
    store.write("ascii", 12.to_s)
    store.write("latin1", "caf\xE9".dup.force_encoding(Encoding::ISO_8859_1))

    assert_equal Encoding::UTF_8, store.read("utf8").encoding
    assert_equal "Grüße", store.read("utf8")
    assert_equal Encoding::BINARY, store.read("binary").encoding
    assert_equal "\xFF\x00".b, store.read("binary")
    assert_equal Encoding::US_ASCII, store.read("ascii").encoding
    assert_equal Encoding::ISO_8859_1, store.read("latin1").encoding
    assert_equal "caf\xE9".b, store.read("latin1").b
  end

  def test_a_string_subclass_keeps_its_class
    value = ActiveSupport::SafeBuffer.new("<b>safe</b>")
    store.write("html", value)

    assert_instance_of ActiveSupport::SafeBuffer, store.read("html")
  end

  def test_nil_is_cached_and_counts_as_present
    assert store.write("empty", nil)

    assert store.exist?("empty")
    assert_nil store.fetch("empty") { flunk "nil was cached, the block must not run" }
  end

  def test_a_value_read_back_can_be_changed_without_changing_the_cache
    store.write("text", "original")
    store.read("text") << " changed"

    assert_equal "original", store.read("text")
  end

  def test_a_value_changed_after_writing_does_not_change_the_cache
    value = +"original"
    store.write("text", value)
    value << " changed"

    assert_equal "original", store.read("text")
  end

  def test_write_overwrites
    store.write("key", "first")
    store.write("key", "second")

    assert_equal "second", store.read("key")
  end

  def test_delete_removes_and_says_whether_it_did
    store.write("key", "value")

    assert store.delete("key")
    assert_nil store.read("key")
    refute store.delete("key")
  end

  def test_fetch_runs_the_block_on_a_miss_and_stores_its_result
    assert_equal "computed", store.fetch("key") { "computed" }
    assert_equal "computed", store.read("key")
  end

  def test_fetch_returns_a_hit_without_running_the_block
    store.write("key", "cached")

    assert_equal "cached", store.fetch("key") { flunk "the block must not run on a hit" }
  end

  def test_fetch_passes_the_key_to_the_block
    assert_equal "key!", store.fetch("key") { |name| "#{name}!" }
  end

  def test_fetch_without_a_block_reads
    store.write("key", "cached")

    assert_equal "cached", store.fetch("key")
    assert_nil store.fetch("missing")
  end

  def test_fetch_with_force_recomputes
    store.write("key", "old")

    assert_equal "new", store.fetch("key", force: true) { "new" }
    assert_equal "new", store.read("key")
    assert_raises(ArgumentError) { store.fetch("key", force: true) }
  end

  def test_values_written_by_one_store_are_read_by_another_on_the_same_table
    store.write("shared", {from: "first"})

    assert_equal({from: "first"}, build_store.read("shared"))
  end

  def test_a_value_of_25_kilobytes_round_trips
    value = "abcdefghij" * 2_500
    store.write("large", value)

    assert_equal value, store.read("large")
  end

  # With L1 alone a large String goes to the table as a Strata::Entry::Split (header and value
  # copied into place); the bytes stored are the entry a joined write stores, so a store that
  # joins reads it, and the other way round.
  def test_a_large_string_written_in_two_parts_is_the_same_entry
    value = "0123456789" * 2_560
    versioned = ActiveSupport::Cache::Entry.new(value, version: "v1", expires_at: Time.now.to_f + 60)
    codec = ActiveSupport::Cache::StrataStore::Codec.new(nil, nil)
    split = codec.dump(versioned, false, nil, split: true)
    assert_instance_of Strata::Entry::Split, split
    assert_equal codec.dump(versioned, false, nil), split.head + split.payload
    assert_equal Strata::Entry::MARKER, split.getbyte(0)
    assert_equal "0".ord, split.getbyte(split.head.bytesize)
    assert_same value, split.payload, "the value is not copied before the table copies it"

    store.write("large", value, version: "v1")
    store.fetch("filled", version: "v1") { value }
    tier = Strata::Tiers::SharedMemory.new(path: table_path, size: TABLE_SIZE)
    begin
      %w[large filled].each do |key|
        bytes = tier.get(key)
        assert_equal value, Strata::Entry.decode(bytes).payload
        assert_equal "v1", Strata::Entry.decode(bytes).version
      end
    ensure
      tier.close
    end
    assert_equal value, store.read("large", version: "v1")
    assert_nil store.read("large", version: "v2")
    assert_equal value, store.read("filled", version: "v1")
  end

  def test_small_compressed_and_raw_values_are_never_split
    codec = ActiveSupport::Cache::StrataStore::Codec.new(nil, Zlib)
    small = ActiveSupport::Cache::Entry.new("x" * (Strata::Entry::SPLIT_MIN - 1))
    assert_instance_of String, codec.dump(small, false, nil, split: true)
    compressible = ActiveSupport::Cache::Entry.new("x" * 20_000)
    assert_instance_of String, codec.dump(compressible, false, 1024, split: true)
    assert_equal "12345", codec.dump(ActiveSupport::Cache::Entry.new(12_345), true, nil, split: true)
  end

  def test_lookup_store_builds_the_store_from_a_symbol
    cache = ActiveSupport::Cache.lookup_store(:strata_store, l1: {path: File.join(@tmpdir, "t.strata"), size: TABLE_SIZE})
    @stores << cache

    assert_instance_of ActiveSupport::Cache::StrataStore, cache
    assert cache.write("key", 1)
    assert_equal 1, cache.read("key")
  end

  def test_the_table_size_is_required
    error = assert_raises(ArgumentError) { ActiveSupport::Cache::StrataStore.new(l1: {path: table_path}) }

    assert_match(/size/, error.message)
  end

  def test_the_store_advertises_cache_versioning
    assert ActiveSupport::Cache::StrataStore.supports_cache_versioning?
  end
end
