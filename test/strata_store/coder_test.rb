# frozen_string_literal: true

require_relative "store_case"
require "securerandom"

# coder: (Rails 7.1+): the app's coder dumps and loads whole entries, and its bytes sit behind
# Strata's own header, so every tier holds the same bytes and expiry still works without loading
# them. coder: nil is accepted (Strata's own encoding, uncompressed), and the options are checked
# together as Rails checks them for every store.
class StrataStoreCoderTest < Strata::StoreCase
  # Marshal of the whole entry, noting what it was given and what it gave back.
  class SpyCoder
    attr_reader :dumped, :loaded, :compressed

    def initialize
      @dumped = []
      @loaded = []
      @compressed = []
    end

    def dump(entry)
      @dumped << entry
      "spy:" + Marshal.dump(entry)
    end

    def load(payload)
      raise ActiveSupport::Cache::DeserializationError, "not ours" unless payload.start_with?("spy:")

      entry = Marshal.load(payload.delete_prefix("spy:"))
      @loaded << entry
      entry
    end

    def dump_compressed(entry, threshold)
      @compressed << [entry, threshold]
      dump(entry)
    end
  end

  def setup
    @namespace = "coder-#{SecureRandom.hex(6)}"
    @coder = SpyCoder.new
  end

  def test_the_coder_dumps_and_loads_each_entry_once
    cache = build_store(coder: @coder)
    cache.write("key", "value", expires_in: 60, version: "v1")
    cache.write_multi({"a" => 1, "b" => [2]})

    assert_equal ["value", 1, [2]], @coder.dumped.map(&:value)
    assert_instance_of ActiveSupport::Cache::Entry, @coder.dumped.first
    assert_equal "value", cache.read("key", version: "v1")
    assert_equal({"a" => 1, "b" => [2]}, cache.read_multi("a", "b"))
    assert_equal ["value", 1, [2]], @coder.loaded.map(&:value)
    assert_nil cache.read("missing")
    assert_equal 3, @coder.loaded.size, "a miss loads nothing"
  end

  def test_every_tier_holds_the_coders_bytes_behind_the_strata_header
    cache = build_store(coder: @coder, memcached: memcached, sql: {path: File.join(@tmpdir, "l3.sqlite3")},
      namespace: @namespace)
    cache.write("key", {"a" => 1}, expires_in: 60, version: "v1")

    key = tier_key(cache, "key")
    copies = %i[l1 l2 l3].map { |tier| cache.stack[tier].get(key) }
    assert_equal 1, copies.uniq.size
    entry = Strata::Entry.decode(copies.first)
    assert_equal Strata::Entry::CODER, entry.serializer
    assert_equal "v1", entry.version
    assert_operator entry.expires_at, :>, Strata::Entry.now
    assert entry.payload.start_with?("spy:")
    assert_equal({"a" => 1}, cache.read("key", version: "v1"))
  end

  # Through the header, on the hit path and on the base one (which loads the entry, as Rails'
  # stores do, and then finds it out of date).
  def test_an_expired_or_mismatched_entry_is_a_miss
    cache = build_store(coder: @coder)
    cache.write("key", "value", expires_in: 60, version: "v1")

    assert_equal "value", cache.read("key", version: "v1")
    assert_nil cache.read("key", version: "v2")
    travel 61.seconds do
      assert_nil cache.read("key", version: "v1")
      assert_equal "new", cache.fetch("key", version: "v1") { "new" }
    end
    assert_equal "new", cache.read("key", version: "v1")
  end

  def test_dump_compressed_gets_the_threshold_when_compression_is_on
    cache = build_store(coder: @coder, compress: true, compress_threshold: 10)
    cache.write("key", "value")
    cache.write("plain", "value", compress: false)

    assert_equal [["value", 10]], @coder.compressed.map { |entry, threshold| [entry.value, threshold] }
    assert_equal 2, @coder.dumped.size
    assert_equal "value", cache.read("key")
  end

  def test_a_coder_without_dump_compressed_is_used_uncompressed
    cache = build_store(coder: Marshal, compress: true, compress_threshold: 1)
    cache.write("key", "a" * 1000)

    entry = Strata::Entry.decode(open_table.get(tier_key(cache, "key")))
    refute entry.compressed?, "the store's own compressor stays out of a coder's bytes"
    assert_instance_of ActiveSupport::Cache::Entry, Marshal.load(entry.payload)
    assert_equal "a" * 1000, cache.read("key")
  end

  def test_stores_with_and_without_the_coder_miss_on_each_others_entries_without_failing
    with_coder = build_store(coder: @coder)
    without = build_store
    with_coder.write("by_coder", [1])
    without.write("by_default", [2])

    assert_nil without.read("by_coder")
    assert_equal [2], with_coder.read("by_default"), "Strata's own entries stay readable"
    assert_equal({}, without.stats[:failures])
  end

  def test_counters_stay_counters
    cache = build_store(coder: @coder)
    cache.write("count", 1, raw: true)

    assert_equal 3, cache.increment("count", 2)
    assert_equal "3", cache.read("count", raw: true)
  end

  def test_a_nil_coder_stores_entries_in_strata_encoding_uncompressed
    cache = build_store(coder: nil, compress: true, compress_threshold: 1)
    cache.write("text", "a" * 1000)
    cache.write("object", ["a"] * 1000)

    text = Strata::Entry.decode(open_table.get(tier_key(cache, "text")))
    object = Strata::Entry.decode(open_table.get(tier_key(cache, "object")))
    refute text.compressed?
    refute object.compressed?
    assert_equal "a" * 1000, text.payload
    assert_equal ["a"] * 1000, cache.read("object")
  end

  def test_options_are_checked_together_as_rails_checks_them
    assert_raises(ArgumentError, match: /compressor/) { build_store(coder: Marshal, compressor: Zlib) }
    assert_raises(ArgumentError, match: /serializer/) { build_store(coder: Marshal, serializer: :message_pack) }
    assert_raises(ArgumentError, match: /dump and load/) { build_store(coder: Object.new) }
  end

  private

  def memcached
    {servers: Strata::TestSupport.memcached_servers, timeout: 2}
  end
end
