# frozen_string_literal: true

require_relative "store_case"
require "json"

class StrataStoreOptionsTest < Strata::StoreCase
  # A serializer of our own: JSON text, so the test can see it was used.
  module JsonSerializer
    def self.dump(value)
      JSON.generate(value)
    end

    def self.load(payload)
      JSON.parse(payload)
    end
  end

  def test_the_namespace_prefixes_every_key
    cache = build_store(namespace: "app")
    cache.write("key", "value")

    assert_equal "value", cache.read("key")
    assert_equal "value", store.read("app:key")
    assert_nil store.read("key")
  end

  def test_a_namespace_can_be_a_proc
    generation = "1"
    cache = build_store(namespace: -> { "gen#{generation}" })
    cache.write("key", "first")
    generation = "2"

    assert_nil cache.read("key")
    assert_equal "first", store.read("gen1:key")
  end

  def test_a_namespace_can_be_given_or_removed_per_call
    cache = build_store(namespace: "app")
    cache.write("key", "other", namespace: "other")
    cache.write("key", "bare", namespace: nil)

    assert_equal "other", store.read("other:key")
    assert_equal "bare", store.read("key")
  end

  def test_compression_is_off_unless_asked_for
    value = "a" * 10_000
    store.write("key", value)

    refute decoded(store, "key").compressed?
  end

  def test_compress_shrinks_large_values_past_the_threshold
    cache = build_store(compress: true, compress_threshold: 1_000)
    cache.write("large", "a" * 10_000)
    cache.write("small", "a" * 500)
    cache.write("object", Array.new(2_000, "x"))

    assert decoded(cache, "large").compressed?
    assert decoded(cache, "object").compressed?
    refute decoded(cache, "small").compressed?
    assert_equal "a" * 10_000, cache.read("large")
    assert_equal Array.new(2_000, "x"), cache.read("object")
  end

  # A write's own compress and compress_threshold win over the store's, either way; the fetch of a
  # cold key writes its block's value the same way.
  def test_compress_given_to_a_write_overrides_the_stores
    store.write("asked", "a" * 10_000, compress: true, compress_threshold: 100)
    store.fetch("fetched", compress: true, compress_threshold: 100) { "b" * 10_000 }
    cache = build_store(compress: true, compress_threshold: 1_000)
    cache.write("declined", "a" * 10_000, compress: false)
    cache.write("raised", "a" * 10_000, compress_threshold: 20_000)

    assert decoded(store, "asked").compressed?
    assert decoded(store, "fetched").compressed?
    refute decoded(cache, "declined").compressed?
    refute decoded(cache, "raised").compressed?
    assert_equal "b" * 10_000, store.read("fetched")
  end

  def test_compress_keeps_a_value_that_does_not_shrink_as_it_is
    random = Random.new(1).bytes(5_000)
    cache = build_store(compress: true, compress_threshold: 1_000)
    cache.write("random", random)

    refute decoded(cache, "random").compressed?
    assert_equal random, cache.read("random")
  end

  def test_a_custom_compressor_is_used
    cache = build_store(compress: true, compressor: CountingCompressor)
    cache.write("key", "ab" * 1_000)

    assert_equal "ab" * 1_000, cache.read("key")
    assert_equal 1, CountingCompressor.inflated
  end

  def test_skip_nil_does_not_cache_a_nil_result
    assert_nil store.fetch("key", skip_nil: true) { nil }
    refute store.exist?("key")

    assert_nil store.fetch("key") { nil }
    assert store.exist?("key")
  end

  def test_unless_exist_writes_only_a_missing_key
    assert store.write("key", "first", unless_exist: true)
    refute store.write("key", "second", unless_exist: true)
    assert_equal "first", store.read("key")
  end

  def test_raw_strings_read_back_unchanged
    store.write("key", "raw text", raw: true)

    assert_equal "raw text", store.read("key", raw: true)
  end

  def test_the_message_pack_serializer_round_trips
    cache = build_store(serializer: :message_pack)
    value = {"list" => [1, 2.5, "three", nil, true], "time" => Time.at(1_700_000_000)}
    cache.write("key", value)

    assert_equal Strata::Entry::MESSAGE_PACK, decoded(cache, "key").serializer
    assert_equal value, cache.read("key")
  end

  def test_entries_stay_readable_after_switching_serializers
    marshal = build_store
    message_pack = build_store(serializer: :message_pack)
    marshal.write("by_marshal", [1, "a"])
    message_pack.write("by_message_pack", [2, "b"])

    assert_equal [2, "b"], marshal.read("by_message_pack")
    assert_equal [1, "a"], message_pack.read("by_marshal")
  end

  def test_a_custom_serializer_is_used_for_non_string_values
    cache = build_store(serializer: JsonSerializer)
    cache.write("key", {"a" => [1, 2]})

    assert_equal Strata::Entry::CUSTOM, decoded(cache, "key").serializer
    assert_equal '{"a":[1,2]}', decoded(cache, "key").payload
    assert_equal({"a" => [1, 2]}, cache.read("key"))
  end

  def test_an_entry_by_a_custom_serializer_is_a_miss_for_a_store_without_it
    build_store(serializer: JsonSerializer).write("key", {"a" => 1})

    assert_nil store.read("key")
  end

  def test_the_marshal_serializer_names_rails_uses_are_accepted
    %i[marshal_7_1 marshal_7_0].each do |name|
      cache = build_store(serializer: name)
      cache.write("key", [name])

      assert_equal Strata::Entry::MARSHAL, decoded(cache, "key").serializer
    end
  end

  def test_bad_serializer_options_are_refused
    assert_raises(ArgumentError) { build_store(serializer: :passthrough) }
    assert_raises(ArgumentError) { build_store(serializer: Object.new) }
    assert_raises(ArgumentError) { build_store(coder: Object.new) }
  end

  def test_the_table_path_defaults_to_one_per_namespace
    previous = ENV["XDG_RUNTIME_DIR"]
    ENV["XDG_RUNTIME_DIR"] = @tmpdir
    cache = ActiveSupport::Cache::StrataStore.new(namespace: "myapp", l1: {size: TABLE_SIZE})
    @stores << cache

    assert_equal Strata::Tiers::SharedMemory.default_path(Strata::Tiers::SharedMemory.default_name("myapp")), cache.stack[:l1].path
    assert cache.stack[:l1].path.start_with?(@tmpdir)
  ensure
    ENV["XDG_RUNTIME_DIR"] = previous
  end

  # Issue 35, cause 3: development and production of one app, and two apps, of one user on one
  # host got one table (a development write was served by production). The default table is
  # now the app's, the environment's and the namespace's.
  def test_two_environments_and_two_apps_share_no_table_by_default
    previous = ENV.to_h.slice("XDG_RUNTIME_DIR", "RAILS_ENV", "RACK_ENV")
    ENV["XDG_RUNTIME_DIR"] = @tmpdir
    ENV.delete("RACK_ENV")
    stores = %w[development production].to_h do |env|
      ENV["RAILS_ENV"] = env
      cache = ActiveSupport::Cache::StrataStore.new(l1: {size: TABLE_SIZE})
      @stores << cache
      [env, cache]
    end
    refute_equal stores["development"].stack[:l1].path, stores["production"].stack[:l1].path
    stores["development"].write("k", "development's")
    assert_nil stores["production"].read("k"), "production does not serve development's value"

    assert_equal "blog-production-cache", Strata::Tiers::SharedMemory.default_name("cache", app: "blog", env: "production")
    refute_equal Strata::Tiers::SharedMemory.default_name(nil, app: "blog", env: "production"),
      Strata::Tiers::SharedMemory.default_name(nil, app: "shop", env: "production")
    assert_equal "app", Strata::Tiers::SharedMemory.default_name(nil, app: "", env: "")
    assert_equal "my_app-production", Strata::Tiers::SharedMemory.default_name(nil, app: "my app", env: "production")
  ensure
    %w[XDG_RUNTIME_DIR RAILS_ENV RACK_ENV].each { |name| previous&.key?(name) ? ENV[name] = previous[name] : ENV.delete(name) }
  end

  def test_tier_options_stay_out_of_the_per_call_defaults
    refute store.options.key?(:l1)
  end

  private

  def decoded(cache, name)
    Strata::Entry.decode(open_table.get(tier_key(cache, name)))
  end

  # Zlib, counting its inflates, so the test can see the store used it.
  module CountingCompressor
    class << self
      attr_accessor :inflated

      def deflate(payload)
        Zlib.deflate(payload)
      end

      def inflate(payload)
        self.inflated = (inflated || 0) + 1
        Zlib.inflate(payload)
      end
    end
  end
end
