# frozen_string_literal: true

require_relative "store_case"
require "securerandom"

# fetch_multi tells subscribers what ActiveSupport's own does (one cache_read_multi with
# super_operation: :fetch_multi and the hits, then one cache_write_multi of what the block
# computed, written through write_multi_entries), and still reads each miss through with
# single-flight.
class StrataStoreFetchMultiEventsTest < Strata::StoreCase
  # Notes the keys of each write_multi_entries call.
  class WriteMultiSpy < ActiveSupport::Cache::StrataStore
    attr_reader :multi_writes

    private

    def write_multi_entries(hash, **options)
      (@multi_writes ||= []) << hash.keys
      super
    end
  end

  def setup
    @namespace = "fm-#{SecureRandom.hex(6)}"
  end

  def test_the_read_event_names_fetch_multi_and_its_hits
    store.write("cached", "value")

    events = capture_events("cache_read_multi.active_support") do
      store.fetch_multi("missing", "cached") { |name| "computed #{name}" }
    end

    assert_equal 1, events.size
    assert_equal :fetch_multi, events[0][:super_operation]
    assert_equal %w[missing cached], events[0][:key]
    assert_equal %w[cached], events[0][:hits]
  end

  # In the order ActiveSupport's own stores emit them (Rails 7.1 writes inside the read event,
  # 7.2 after it).
  def test_the_misses_are_written_in_one_write_multi
    memory = ActiveSupport::Cache::MemoryStore.new
    expected = multi_operations { memory.fetch_multi("a", "b") { |name| name * 2 } }
    writes = capture_events("cache_write_multi.active_support") do
      assert_equal expected, multi_operations { store.fetch_multi("a", "b") { |name| name * 2 } }
    end

    assert_equal 2, expected.size
    assert_equal({"a" => "aa", "b" => "bb"}, writes[0][:key])
    assert_equal "aa", store.read("a")
  end

  def test_the_misses_go_through_write_multi_entries
    spy = WriteMultiSpy.new(l1: {path: table_path, size: TABLE_SIZE}, memcached: memcached, namespace: @namespace)
    @stores << spy
    spy.write("cached", "value")

    assert_equal({"a" => "aa", "cached" => "value", "b" => "bb"}, spy.fetch_multi("a", "cached", "b") { |name| name * 2 })
    assert_equal [[tier_key(spy, "a"), tier_key(spy, "b")]], spy.multi_writes
    assert_equal "bb", spy.read("b")
  end

  # Another caller's fetch_multi of a key being filled waits for that fill, runs no block, and
  # counts the value as a hit.
  def test_a_miss_another_caller_is_filling_is_waited_for
    filler = build_store(memcached: memcached, namespace: @namespace, fill_wait: 30)
    waiter = build_store(memcached: memcached, namespace: @namespace, fill_wait: 30)
    computing = Queue.new
    finish = Queue.new
    first = Thread.new do
      filler.fetch_multi("key", "other") do |name|
        computing << name
        finish.pop
        "filled #{name}"
      end
    end
    assert_equal "key", computing.pop

    events = nil
    waited = nil
    second = Thread.new do
      events = capture_events("cache_read_multi.active_support") do
        waited = waiter.fetch_multi("key") { flunk "the block runs once, in the filler" }
      end
    end
    assert wait_until { second.status == "sleep" }, "the second caller waits for the fill"
    finish << :go
    assert_equal "other", computing.pop
    finish << :go

    assert_equal({"key" => "filled key", "other" => "filled other"}, first.value)
    second.join
    assert_equal({"key" => "filled key"}, waited)
    # Active Support 8.0 and later give the hits as keys (namespaced), before as the names asked for.
    hits = (ActiveSupport.version >= Gem::Version.new("8.0")) ? [waiter.send(:normalize_key, "key", {})] : %w[key]
    assert_equal hits, events[0][:hits]
  end

  private

  # The names of the read_multi and write_multi events the block emits, in the order they end.
  def multi_operations
    operations = []
    callback = ->(name, *) { operations << name }
    ActiveSupport::Notifications.subscribed(callback, /\Acache_(read|write)_multi\.active_support\z/) { yield }
    operations
  end

  def memcached
    {servers: Strata::TestSupport.memcached_servers, timeout: 2}
  end
end
