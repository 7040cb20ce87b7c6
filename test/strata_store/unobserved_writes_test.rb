# frozen_string_literal: true

require_relative "store_case"
require "logger"
require "stringio"

# The unwatched write must store exactly what the instrumented base write stores, and step
# aside whenever someone could tell the difference.
class StrataStoreUnobservedWritesTest < Strata::StoreCase
  def test_unwatched_writes_store_what_the_base_write_stores
    assert store.write("string", "text")
    assert store.write("object", {a: [1, 2]})
    assert store.write("nil", nil)
    assert store.write("versioned", "v1", version: 1)
    assert store.write("versioned", "elsewhere", namespace: "other")

    assert_equal "text", store.read("string")
    assert_equal({a: [1, 2]}, store.read("object"))
    assert store.exist?("nil")
    assert_equal "v1", store.read("versioned", version: 1)
    assert_nil store.read("versioned", version: 2)
    assert_equal "elsewhere", store.read("versioned", namespace: "other")
  end

  def test_expiry_options_are_merged_as_the_base_merges_them
    store.write("in", "a", expires_in: 60)
    store.write("at", "b", expires_at: Time.now + 60)
    assert_raises(ArgumentError) { store.write("both", "c", expires_in: 60, expires_at: Time.now + 60) }

    refute store.exist?("both")
    travel 61 do
      assert_nil store.read("in")
      assert_nil store.read("at")
    end
  end

  def test_the_stores_own_options_and_tags_are_written_with_the_entry
    tagged = build_store(namespace: "ns", expires_in: 60)
    tagged.write("key", "stored", tags: ["bugs/1"])
    tagged.write("other", "stored")

    assert_nil store.read("key"), "written under the store's namespace"
    tagged.invalidate_tags("bugs/1")
    assert_nil tagged.read("key"), "written with its tags"
    assert_equal "stored", tagged.read("other")
    travel(61) { assert_nil tagged.read("other"), "written with the store's expires_in" }
  end

  # The point of the layer: no event is made for nobody. (A singleton module on a store of the
  # test's own, to count the base path's instrument calls.)
  def test_an_unwatched_write_skips_the_instrumenter
    calls = 0
    counting = Module.new do
      define_method(:instrument) do |*args, **options, &block|
        calls += 1
        super(*args, **options, &block)
      end
    end
    store.singleton_class.prepend(counting)

    store.write("key", "value")
    assert_equal 0, calls
    capture_events("cache_write.active_support") { store.write("key", "watched") }
    assert_equal 1, calls
    assert_equal "watched", store.read("key")
  end

  def test_a_write_is_instrumented_as_soon_as_someone_subscribes
    writes = capture_events("cache_write.active_support") { store.write("key", "value") }

    assert_equal 1, writes.size
    assert_match(/key\z/, writes.first[:key]) # Rails 7.1 names it as given, 7.2 as normalized
    assert_equal "value", store.read("key")
  end

  def test_a_debug_logger_sees_every_write
    output = StringIO.new
    previous = ActiveSupport::Cache::Store.logger
    ActiveSupport::Cache::Store.logger = Logger.new(output, level: :debug)
    store.write("key", "value")

    assert_match(/Cache write: key/, output.string)
  ensure
    ActiveSupport::Cache::Store.logger = previous
  end

  def test_a_write_in_a_local_cache_block_is_kept_by_the_local_cache
    store.with_local_cache do
      store.write("key", "value")
      open_table.delete(tier_key(store, "key"))

      assert_equal "value", store.read("key")
    end
    assert_nil store.read("key")
  end

  def test_a_failed_write_is_false_and_reported_once
    huge = "x" * (store.stack[:l1].max_value_size + 1)

    reports = capture_reports { refute store.write("huge", huge) }

    assert_equal 1, reports.size
    assert_nil store.read("huge")
  end
end
