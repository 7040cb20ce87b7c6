# frozen_string_literal: true

require_relative "store_case"
require "securerandom"

class StrataStoreMultiTest < Strata::StoreCase
  def test_write_multi_then_read_multi
    store.write_multi("a" => 1, "b" => "two", "c" => nil)

    assert_equal({"a" => 1, "b" => "two", "c" => nil}, store.read_multi("a", "b", "c"))
  end

  def test_read_multi_leaves_out_missing_keys
    store.write("a", 1)

    assert_equal({"a" => 1}, store.read_multi("a", "missing"))
    assert_equal({}, store.read_multi)
  end

  def test_read_multi_answers_under_the_names_it_was_given
    store.write(:sym, 1)
    store.write(%w[compound key], 2)

    assert_equal({:sym => 1, %w[compound key] => 2}, store.read_multi(:sym, %w[compound key]))
  end

  # Keys over 250 bytes are shortened once, after the namespace is added, the same for every
  # kind of name and every call: read_multi finds what write and fetch stored.
  def test_read_multi_finds_long_names_under_a_namespace_as_write_stored_them
    spaced = build_store(namespace: "ns")
    long_string = "s" * 300
    long_array = ["a" * 200, "b" * 100]
    spaced.write(long_string, 1)
    spaced.write(long_array, 2)
    spaced.write(:short, 3)

    assert_equal({long_string => 1, long_array => 2, :short => 3}, spaced.read_multi(long_string, long_array, :short))
    assert_equal({long_array => 2}, spaced.fetch_multi(long_array) { flunk "fetch_multi missed what write stored" })
  end

  # read_multi makes each plain String name's key in the extension (the namespace's bytes, a
  # colon, the name's): it must find what write stored, however the namespace is given.
  def test_read_multi_finds_what_write_stored_under_every_kind_of_namespace
    names = ["plain", "café", "caf\xC3\xA9!".b, :symbol, "s" * 260]
    expected = names.each_with_index.to_h { |name, index| [name, "v#{index}"] }
    [{namespace: "ns"}, {namespace: -> { "proc" }}, {namespace: "espacé"}, {namespace: ""}, {}].each do |options|
      spaced = build_store(**options)
      expected.each { |name, value| spaced.write(name, value) }

      assert_equal expected, spaced.read_multi(*names, "absent", names.first), options.inspect
    end
    store.write("key", "default")
    store.write("key", "other", namespace: "other")
    assert_equal({"key" => "other"}, store.read_multi("key", namespace: "other"))
    assert_equal({"key" => "default"}, store.read_multi("key"))
  end

  def test_read_multi_skips_version_mismatches_and_expired_entries
    store.write("current", 1, version: "v1")
    store.write("stale", 2, version: "v1")
    store.write("expiring", 3, expires_in: 60)

    travel 61.seconds do
      assert_equal({"current" => 1}, store.read_multi("current", "expiring", version: "v1"))
    end
    assert_equal({}, store.read_multi("stale", version: "v2"))
  end

  def test_read_multi_reads_strings_as_the_hit_path_does
    store.write("plain", "a")
    store.write("tagged", "b", tags: "bugs/1")
    store.write("versioned", "c", version: "v1")
    store.write("expiring", "d", expires_in: 60)
    store.write("binary", "\xff".b)

    found = store.read_multi("plain", "tagged", "versioned", "expiring", "binary", version: "v1")
    assert_equal({"plain" => "a", "tagged" => "b", "versioned" => "c", "expiring" => "d", "binary" => "\xff".b}, found)
    assert_equal [Encoding::UTF_8, Encoding::BINARY], found.values_at("tagged", "binary").map(&:encoding)
    assert_equal({}, store.read_multi("versioned", version: "v2"))
    travel 61.seconds do
      assert_equal({"plain" => "a"}, store.read_multi("plain", "expiring"))
    end
    store.invalidate_tags("bugs/1")
    assert_equal({"plain" => "a"}, store.read_multi("plain", "tagged"))
  end

  def test_write_multi_applies_options
    store.write_multi({"a" => 1, "b" => 2}, expires_in: 60)

    travel 61.seconds do
      assert_equal({}, store.read_multi("a", "b"))
    end
  end

  def test_fetch_multi_computes_only_the_misses
    store.write("cached", "hit")
    computed = []

    result = store.fetch_multi("cached", "missing") do |name|
      computed << name
      "made #{name}"
    end

    assert_equal({"cached" => "hit", "missing" => "made missing"}, result)
    assert_equal ["missing"], computed
    assert_equal "made missing", store.read("missing")
  end

  # fetch_multi holds the host lock of each key it missed (its computation's claims): a fetch of
  # such a key inside its block goes through that claim instead of waiting on the lock its own
  # fiber holds. The inner fetch's value is the fill; fetch_multi's own write of it follows.
  def test_a_fetch_inside_fetch_multi_of_one_of_its_keys_uses_its_claim
    result = store.fetch_multi("outer", "inner") do |name|
      (name == "inner") ? store.fetch("inner") { "made inside" } : "made outer"
    end

    assert_equal({"outer" => "made outer", "inner" => "made inside"}, result)
    assert_equal "made inside", store.read("inner")
    assert_equal 0, store.stats[:counters][:store][:lock_waits]
  end

  def test_fetch_multi_with_skip_nil_does_not_store_nils
    store.fetch_multi("nothing", skip_nil: true) { nil }

    refute store.exist?("nothing")
  end

  def test_delete_multi_removes_from_every_tier_in_one_call_each
    cache = build_store(namespace: "dm-#{SecureRandom.hex(4)}", memcached: {servers: Strata::TestSupport.memcached_servers},
      sql: {path: File.join(@tmpdir, "l3.sqlite3")})
    names = Array.new(50) { |i| "dm-#{i}" }
    cache.write_multi(names.to_h { |name| [name, name] })
    keys = names.map { |name| tier_key(cache, name) }
    %i[l1 l2 l3].each { |tier| assert_equal 50, cache.stack[tier].get_multi(keys).size, "#{tier} holds them" }

    assert_equal 50, cache.delete_multi(names + %w[absent-1 absent-2])
    %i[l1 l2 l3].each { |tier| assert_empty cache.stack[tier].get_multi(keys), "#{tier} holds none" }
    assert_equal({}, cache.read_multi(*names))
  end

  def test_delete_multi_counts_what_it_removed
    store.write_multi("a" => 1, "b" => 2)

    assert_equal 2, store.delete_multi(%w[a b missing])
    assert_equal({}, store.read_multi("a", "b"))
  end
end
