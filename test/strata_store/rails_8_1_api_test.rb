# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "stringio"

# What Active Support 8.1 added to the cache store API, on every Rails line StrataStore runs
# on: the max_key_size option, namespace and namespace=, read_counter and write_counter, a local
# cache middleware whose cache can be replaced, and (8.1 only) invalidations reported to
# Rails.event.
class StrataStoreRails81ApiTest < Strata::StoreCase
  RAILS_8_1 = ActiveSupport.gem_version >= Gem::Version.new("8.1")
  STORE = ActiveSupport::Cache::StrataStore

  def setup
    @namespace = "t#{SecureRandom.hex(6)}" # memcached is shared with other runs
  end

  # -- max_key_size

  def test_rails_8_1_is_told_apart_by_what_its_store_has
    assert_equal RAILS_8_1, STORE::SCRUBBED_CUT
    assert_equal RAILS_8_1, STORE::REPORTS_EVENTS
  end

  def test_max_key_size_defaults_to_250_bytes
    key = "k" * 300
    store.write(key, "value")

    assert_equal 250, tier_key(store, key).bytesize
    assert open_table.get(tier_key(store, key))
    assert_equal "value", store.read(key)
  end

  def test_max_key_size_takes_100_to_250_bytes_and_nothing_else
    assert build_store(max_key_size: 100)
    assert build_store(max_key_size: 250, l1: {path: File.join(@tmpdir, "other.strata")})

    [251, 99, 0, -1, 1000, "200", 200.0].each do |size|
      error = assert_raises(ArgumentError, size.inspect) { build_store(max_key_size: size) }
      assert_match(/max_key_size/, error.message)
    end
  end

  # Rails' max_key_size: false (no limit) would hand the tiers keys none of them takes.
  def test_max_key_size_false_is_refused_naming_the_limit
    error = assert_raises(ArgumentError) { build_store(max_key_size: false) }

    assert_match(/max_key_size: false/, error.message)
    assert_match(/250 bytes/, error.message)
  end

  # On 8.1 the keys are those Rails' own Store#normalize_key (namespace_key, then truncate_key)
  # makes with the same namespace and max_key_size; before 8.1 Rails has no truncate_key, and
  # the keys are those this store has always made (the cut on the byte: legacy_key).
  def test_keys_are_the_ones_rails_makes_for_the_same_namespace_and_max_key_size
    names = ["short", "k" * 300, "日" * 100, "a#{"é" * 150}", "\xFF\xFEk".b * 100, ["views", "x" * 300], {id: "y" * 300}]
    # The store's own namespace, and those a call gives instead (nil: none).
    calls = [{}, {namespace: nil}, {namespace: "espace-é"}, {namespace: -> { "called" }}]
    [nil, 100, 180, 249].each do |size|
      options = {namespace: "app"}
      options[:max_key_size] = size if size
      cache = build_store(l1: {path: File.join(@tmpdir, "#{size}.strata")}, **options)
      reference = ActiveSupport::Cache::MemoryStore.new(**options) if RAILS_8_1
      calls.product(names).each do |call, name|
        made = tier_key(cache, name, call)
        expected = RAILS_8_1 ? tier_key(reference, name, call) : legacy_key(cache, name, size || 250, call)
        assert_equal expected.b, made.b, "#{name.inspect[0, 40]}, #{call.inspect}, max_key_size #{size.inspect}"
        assert_operator made.bytesize, :<=, size || 250
      end
    end
  end

  # Where the two cuts differ: Rails 8.1 drops the bytes of a character the cut splits.
  def test_a_cut_through_a_character_keeps_it_whole_on_8_1_and_cuts_on_the_byte_before
    cache = build_store(max_key_size: 100)
    key = "日" * 100
    made = tier_key(cache, key)
    digest = ActiveSupport::Digest.hexdigest(key)
    kept = 100 - ":hash:".bytesize - digest.bytesize

    if RAILS_8_1
      assert_equal "日" * (kept / 3) + ":hash:" + digest, made
      assert made.valid_encoding?
    else
      assert_equal key.b.byteslice(0, kept) + ":hash:" + digest, made.b
      assert_equal 100, made.bytesize
    end
  end

  # Every way in and out makes the same shortened key: the fetch and read hit paths, read_multi's
  # plain read of the table (which makes keys up to max_key_size itself), fetch_multi, writes.
  def test_every_path_stores_and_finds_a_long_key_under_max_key_size
    cache = build_store(namespace: "ns", max_key_size: 120)
    long = "k" * 130
    other = "o" * 130
    short = "s" * 100 # "ns:" + 100 bytes: not shortened

    cache.write(long, "written")
    cache.write_multi(other => "multi", short => "short")
    assert_equal "fetched", cache.fetch("f" * 130) { "fetched" }
    assert_equal({"m" * 130 => "fetched multi"}, cache.fetch_multi("m" * 130) { "fetched multi" })

    table = open_table
    [long, other, "f" * 130, "m" * 130].each do |name|
      key = tier_key(cache, name)
      assert_equal 120, key.bytesize
      assert table.get(key), "#{name[0, 10]}... is stored under its shortened key"
      refute table.get("ns:#{name}"), "nor under the whole one"
    end
    assert table.get("ns:#{short}")

    assert_equal "written", cache.read(long)
    assert_equal "written", cache.fetch(long) { flunk "a hit" }
    assert cache.exist?(other)
    assert_equal({long => "written", other => "multi", short => "short"}, cache.read_multi(long, other, short, "x" * 130))
    assert_equal({long => "written", short => "short"}, cache.fetch_multi(long, short) { flunk "hits" })
    assert cache.delete(long)
    refute table.get(tier_key(cache, long))
  end

  # -- namespace

  def test_namespace_is_the_stores_option_and_rails_8_1_defines_it
    cache = build_store(namespace: "a")

    assert_equal "a", cache.namespace
    owner = RAILS_8_1 ? ActiveSupport::Cache::Store : STORE::Keys
    assert_equal owner, cache.method(:namespace).owner
    assert_equal owner, cache.method(:namespace=).owner
  end

  # Every path reads the namespace per call: no key, prefix or option copy made before
  # namespace= outlives it.
  def test_a_new_namespace_applies_to_every_path_from_the_next_call_on
    cache = build_store(namespace: "a")
    cache.write("k", "value")
    cache.write("other", "other value")
    each_read_path(cache) { |value, found| assert_equal ["value", {"k" => "value", "other" => "other value"}], [value, found] }

    cache.namespace = "b"
    assert_equal "b", cache.namespace
    each_read_path(cache) { |value, found| assert_equal [nil, {}], [value, found] }
    assert_equal "computed", cache.fetch("k") { "computed" }
    assert open_table.get("b:k"), "written under the new namespace"

    cache.namespace = "a"
    each_read_path(cache) { |value, found| assert_equal ["value", {"k" => "value", "other" => "other value"}], [value, found] }

    cache.namespace = nil
    assert_nil cache.read("k")
    cache.write("k", "bare")
    assert open_table.get("k")
  end

  def test_a_new_namespace_applies_to_counters_and_deletes
    cache = build_store(namespace: "a")
    cache.increment("n", 3)
    cache.namespace = "b"

    assert_equal 1, cache.increment("n")
    assert cache.delete("n")
    assert_nil cache.read("n")
    assert_equal 3, cache.read("n", namespace: "a")
  end

  # -- read_counter and write_counter

  def test_read_counter_and_write_counter_are_rails_8_1s_where_it_has_them
    owner = RAILS_8_1 ? ActiveSupport::Cache::Store : STORE::Counting
    assert_equal owner, store.method(:read_counter).owner
    assert_equal owner, store.method(:write_counter).owner
  end

  # Counters live in memcached when there is one, else in L1; SQL keeps none.
  def test_write_counter_then_increment_reads_back_on_every_layout_with_counters
    memcached = {servers: Strata::TestSupport.memcached_servers}
    layouts = {
      l1: {l1: {}},
      memcached: {memcached: memcached},
      l1_memcached: {l1: {}, memcached: memcached},
      l1_sql: {l1: {}, sql: {path: File.join(@tmpdir, "l1_sql.sqlite3")}},
      memcached_sql: {memcached: memcached, sql: {path: File.join(@tmpdir, "memcached_sql.sqlite3")}},
      l1_memcached_sql: {l1: {}, memcached: memcached, sql: {path: File.join(@tmpdir, "all.sqlite3")}}
    }
    layouts.each do |name, tiers|
      tiers = tiers.merge(l1: {path: File.join(@tmpdir, "#{name}.strata"), size: TABLE_SIZE}) if tiers.key?(:l1)
      cache = STORE.new(namespace: "#{@namespace}-#{name}", **tiers)
      @stores << cache

      assert cache.write_counter("n", 5), name
      assert_equal 6, cache.increment("n"), name
      assert_equal 6, cache.read_counter("n"), name
      assert_equal 4, cache.decrement("n", 2), name
      assert_equal 4, cache.read_counter("n"), name
      assert_equal "4", cache.read("n", raw: true), name
      assert_nil cache.read_counter("missing"), name
      cache.delete("n")
    end

    # SQL alone has no counters: the value is written and read back, increment is nil.
    sql_alone = STORE.new(sql: {path: File.join(@tmpdir, "alone.sqlite3")})
    @stores << sql_alone
    assert sql_alone.write_counter("n", 5)
    assert_nil sql_alone.increment("n")
    assert_equal 5, sql_alone.read_counter("n")
  end

  def test_write_counter_takes_an_integer_in_any_form_and_options
    assert store.write_counter("n", "7")
    assert_equal 8, store.increment("n")
    assert store.write_counter("short", 1, expires_in: 0.2)
    assert_equal 1, store.read_counter("short")

    assert wait_until { store.read_counter("short").nil? }, "the counter expires"
  end

  def test_counters_read_back_through_a_local_cache
    store.with_local_cache do
      store.write_counter("n", 5)
      assert_equal 6, store.increment("n")
      assert_equal 6, store.read_counter("n")
    end
    assert_equal 6, store.read_counter("n")
  end

  # -- the local cache middleware

  def test_the_middleware_is_rails_local_cache_middleware_by_name
    assert_equal "ActiveSupport::Cache::Strategy::LocalCache", store.middleware.name
    assert_same store, store.middleware.cache
    assert_same store.middleware, store.middleware
    assert_kind_of ActiveSupport::Cache::Strategy::LocalCache::Middleware, store.middleware if RAILS_8_1
  end

  def test_reads_in_one_request_are_served_by_its_local_cache
    store.write("k", "value")
    table = open_table
    key = tier_key(store, "k")
    seen = []
    app = lambda do |_env|
      seen << store.read("k")
      table.delete(key) # another process's delete: this request has its copy
      seen << store.read("k") << store.fetch("k") { "computed" }
      [200, {}, ["body"]]
    end

    status, _, body = store.middleware.new(app).call(request_env)
    assert_equal 200, status
    assert store.send(:local_cache), "open until the body is closed"
    body.close

    assert_equal ["value", "value", "value"], seen
    assert_nil store.send(:local_cache)
    assert_nil store.read("k")
  end

  def test_a_request_that_raises_leaves_no_local_cache
    middleware = store.middleware.new(->(_env) { raise "boom" })

    assert_raises(RuntimeError) { middleware.call(request_env) }
    assert_nil store.send(:local_cache)
  end

  # Before 8.1, StrataStore's own new_local_cache and unset_local_cache (LocalCacheMiddleware)
  # open and close the store's local cache; on 8.1 they are Rails' own.
  def test_new_and_unset_local_cache_are_rails_own_on_8_1_and_strata_s_before
    local_cache = ActiveSupport::Cache::Strategy::LocalCache
    if RAILS_8_1
      assert local_cache.public_method_defined?(:new_local_cache)
      assert_equal local_cache, store.method(:new_local_cache).owner
      return
    end

    # The shapes of what it reaches into: rails_private_api_test.rb.
    assert_equal STORE::LocalCacheMiddleware, store.method(:new_local_cache).owner
    store.new_local_cache
    assert_kind_of local_cache::LocalStore, store.send(:local_cache)
    store.unset_local_cache
    assert_nil store.send(:local_cache)
  end

  # Rails 8.1 lets the middleware inserted at boot take the store that replaced Rails.cache
  # (Middleware#cache=); StrataStore's own middleware does the same on the lines before.
  def test_the_middleware_follows_the_store_that_replaces_the_cache
    old = store
    replacement = build_store(l1: {path: File.join(@tmpdir, "replacement.strata")})
    replacement.write("k", "value")
    middleware = old.middleware.new(lambda do |_env|
      [200, {}, [old.send(:local_cache).inspect, replacement.send(:local_cache).class.name]]
    end)

    old.middleware.cache = replacement
    _, _, body = middleware.call(request_env)
    parts = []
    body.each { |part| parts << part }

    assert_equal ["nil", ActiveSupport::Cache::Strategy::LocalCache::LocalStore.name], parts
    body.close
    assert_nil replacement.send(:local_cache)
  end

  # -- Rails.event

  def test_invalidate_tags_is_reported_to_rails_event_on_8_1
    if RAILS_8_1
      subscriber = Recorder.new
      ActiveSupport.event_reporter.subscribe(subscriber)
      begin
        instrumented = capture_events(STORE::INVALIDATE_EVENT) { store.invalidate_tags("bugs/1", :bugs, "bugs/1") }
      ensure
        ActiveSupport.event_reporter.unsubscribe(subscriber)
      end

      events = subscriber.events.select { |event| event[:name] == "strata.invalidate" }
      assert_equal 1, events.size
      assert_equal({tags: ["bugs/1", "bugs", "bugs/1"], versions: 2}, events.first[:payload])
      assert_equal __FILE__, events.first[:source_location][:filepath]
      assert_equal 1, instrumented.size, "invalidate.strata is instrumented as before"
    else
      # No reporter before 8.1: one defined now (an app's own, say) is not called.
      refute ActiveSupport.respond_to?(:event_reporter)
      subscriber = Recorder.new
      ActiveSupport.define_singleton_method(:event_reporter) { subscriber.tap { |recorder| recorder.events << :asked } }
      begin
        instrumented = capture_events(STORE::INVALIDATE_EVENT) { assert store.invalidate_tags("bugs/1") }
      ensure
        ActiveSupport.singleton_class.remove_method(:event_reporter)
      end
      assert_empty subscriber.events
      assert_equal 1, instrumented.size
    end
  end

  # An event reporter subscriber that keeps what it is told.
  class Recorder
    attr_reader :events

    def initialize
      @events = []
    end

    def emit(event)
      @events << event
    end
  end

  private

  # The key this store made before 8.1 (and still makes there): namespaced, then cut on the byte.
  def legacy_key(cache, name, size, options)
    key = cache.send(:expanded_key, name)
    namespace = options.key?(:namespace) ? options[:namespace] : cache.namespace
    namespace = namespace.call if namespace.respond_to?(:call)
    key = "#{namespace}:#{key.dup.force_encoding(Encoding::UTF_8)}" if namespace
    return key if key.bytesize <= size

    digest = ActiveSupport::Digest.hexdigest(key)
    key.b.byteslice(0, size - 6 - digest.bytesize) + ":hash:" + digest
  end

  # Yields [read, read_multi] of "k" and "other" as each read path answers: unobserved (the hit
  # paths that skip the events), observed, and inside a local cache block.
  def each_read_path(cache)
    [:unobserved, :observed, :local].each do |path|
      read = lambda do
        value = cache.read("k")
        fetched = cache.fetch("k", skip_nil: true) { nil }
        value.nil? ? assert_nil(fetched, path) : assert_equal(value, fetched, "fetch agrees with read (#{path})")
        assert_equal !value.nil?, cache.exist?("k"), "exist? agrees with read (#{path})"
        # compact: Rails 7.1's local cache answers a miss it recorded (the read above) as nil
        [value, cache.read_multi("k", "other").compact]
      end
      answer = nil
      case path
      when :unobserved then answer = read.call
      when :observed then capture_events("cache_read.active_support") { answer = read.call }
      when :local then cache.with_local_cache { answer = read.call }
      end
      yield(*answer)
    end
  end

  def request_env
    {"REQUEST_METHOD" => "GET", "PATH_INFO" => "/", "rack.input" => StringIO.new}
  end
end
