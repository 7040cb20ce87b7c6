# frozen_string_literal: true

require "test_helper"
require "strata/engine"
require "active_support"
require "active_support/cache/strata_store"

# Strata::Engine as a cache on Strings, without Rails: read, read_multi, write, fetch, delete,
# increment and invalidate_tags, in each layout, and sharing computations with the Rails adapter.
class EngineCacheTest < Minitest::Test
  include Strata::TestSupport

  LAYOUTS = %i[l1 l1_sql memcached l1_memcached_sql].freeze

  def setup
    @dir = private_tmpdir
    @engines = []
  end

  def teardown
    @engines.each(&:close)
    FileUtils.remove_entry(@dir)
  end

  # An engine on layout's tiers, in files of its own, and its own keys on memcached.
  def engine(layout, **options)
    tiers = {}
    tiers[:l1] = {path: File.join(@dir, "#{layout}.l1"), size: 4 << 20} if layout.to_s.include?("l1")
    tiers[:memcached] = {servers: memcached_servers, timeout: 2} if layout.to_s.include?("memcached")
    tiers[:sql] = {path: File.join(@dir, "#{layout}.sqlite3")} if layout.to_s.include?("sql")
    engine = Strata::Engine.new(**tiers, **options)
    @engines << engine
    engine
  end

  def each_layout
    LAYOUTS.each do |layout|
      @prefix = "engine-#{layout}-#{rand(1 << 40)}/"
      yield engine(layout), layout
    end
  end

  def key(name)
    "#{@prefix}#{name}"
  end

  def test_a_value_comes_back_as_it_was_written
    each_layout do |engine, layout|
      assert engine.write(key("utf8"), "déjà vu"), layout
      assert engine.write(key("binary"), "\xFF\x00".b), layout

      assert_equal "déjà vu", engine.read(key("utf8")), layout
      assert_equal Encoding::UTF_8, engine.read(key("utf8")).encoding, layout
      assert_equal "\xFF\x00".b, engine.read(key("binary")), layout
      assert_equal Encoding::BINARY, engine.read(key("binary")).encoding, layout
      assert_nil engine.read(key("missing")), layout
      assert_equal({key("utf8") => "déjà vu"}, engine.read_multi(key("utf8"), key("missing")), layout)
    end
  end

  def test_fetch_computes_a_miss_once_and_serves_it_after
    each_layout do |engine, layout|
      runs = 0
      2.times do
        assert_equal "page", engine.fetch(key("page"), ttl: 60) { "page".tap { runs += 1 } }, layout
      end

      assert_equal 1, runs, layout
      assert_equal "page", engine.read(key("page")), layout
    end
  end

  def test_an_entry_past_its_ttl_misses
    each_layout do |engine, layout|
      engine.write(key("short"), "v", ttl: 5)
      later = Strata::Entry.now + 6_000
      Strata::Entry.stub(:now, later) { assert_nil engine.read(key("short")), layout }
      assert_equal "v", engine.read(key("short")), layout
    end
  end

  def test_invalidate_tags_makes_what_was_built_from_them_miss_nested_fetches_included
    each_layout do |engine, layout|
      engine.write(key("bug"), "bug 42", tags: ["bugs/42"])
      page = engine.fetch(key("page")) do
        engine.fetch(key("fragment"), tags: "projects/7") { "fragment" } + engine.read(key("bug"))
      end
      engine.write(key("plain"), "kept")
      assert_equal "fragmentbug 42", page, layout

      assert engine.invalidate_tags("bugs/42"), layout

      assert_nil engine.read(key("bug")), layout
      assert_nil engine.read(key("page")), layout
      assert_equal "fragment", engine.read(key("fragment")), layout
      assert_equal "kept", engine.read(key("plain")), layout

      engine.invalidate_tags(["projects/7"])
      assert_nil engine.read(key("fragment")), layout
    end
  end

  def test_delete_and_increment
    each_layout do |engine, layout|
      engine.write(key("gone"), "v")
      assert engine.delete(key("gone")), layout
      assert_nil engine.read(key("gone")), layout

      assert_equal 3, engine.increment(key("hits"), 3), layout
      assert_equal 5, engine.increment(key("hits"), 2), layout
      assert_equal 4, engine.increment(key("hits"), -1), layout
      assert_equal "4", engine.read(key("hits")), layout
      assert_equal 0, engine.increment(key("floor"), -2), layout
      assert_nil engine.increment(key("gone-not-a-counter").tap { |name| engine.write(name, "text") }), layout
    end
  end

  # One computation slot per engine: the adapter's fetch and the engine's, each inside the
  # other's block, hand their stamps to the one around them.
  def test_the_engine_and_the_rails_store_share_computations
    cache = ActiveSupport::Cache::StrataStore.new(l1: {path: File.join(@dir, "shared.l1"), size: 4 << 20})
    engine = cache.engine
    @engines << cache
    engine.write("bug", "bug 42", tags: ["bugs/42"])
    cache.write("project", "project 7", tags: ["projects/7"])

    assert_equal "bug 42!", cache.fetch("page") { engine.fetch("bug/json") { engine.read("bug") } + "!" }
    assert_equal "project 7?", engine.fetch("summary") { cache.fetch("project/json") { cache.read("project") } + "?" }
    assert_equal "bug 42!", engine.read("page"), "a String the store wrote"

    engine.invalidate_tags("bugs/42")
    cache.invalidate_tags("projects/7")

    %w[page bug/json summary project/json].each { |name| assert_nil cache.read(name), name }
  end

  def test_bad_arguments_are_refused_at_the_call
    engine = engine(:l1)

    assert_raises(TypeError) { engine.read(:k) }
    assert_raises(ArgumentError) { engine.write("", "v") }
    assert_raises(TypeError) { engine.write("k", 1) }
    assert_raises(ArgumentError) { engine.write("k", "v", ttl: 0) }
    assert_raises(ArgumentError) { engine.write("k", "v", tags: [""]) }
    assert_raises(ArgumentError) { engine.fetch("k") }
    assert_raises(ArgumentError) { engine.fetch("k", ttl: -1) { flunk "the block ran" } }
    assert_raises(TypeError) { engine.fetch("k") { 1 } }
    assert_raises(TypeError) { engine.increment("k", 1.5) }
    assert_raises(ArgumentError) { engine.increment("") }
    assert_raises(ArgumentError) { engine.invalidate_tags }
    assert_nil engine.read("k"), "nothing was written"
  end
end
