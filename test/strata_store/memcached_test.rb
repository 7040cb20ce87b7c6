# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "socket"
require "support/scripted_memcached"

# StrataStore with memcached: alone, and in front of it the host table (L1 + L2).
class StrataStoreMemcachedTest < Strata::StoreCase
  def setup
    @namespace = "t#{SecureRandom.hex(6)}"
  end

  def test_memcached_alone_is_a_complete_store
    cache = l2_store

    assert cache.write("key", {a: 1})
    assert_equal({a: 1}, cache.read("key"))
    assert_equal "computed", cache.fetch("other") { "computed" }
    assert cache.exist?("other")
    assert cache.delete("key")
    assert_nil cache.read("key")
    assert_equal [:l2], cache.stack.tier_names
  end

  def test_a_read_falls_through_to_memcached_and_backfills_the_host_table
    l2_store.write("key", "from another host")
    cache = two_tier_store

    first = capture_events("cache_read.active_support") { assert_equal "from another host", cache.read("key") }
    second = capture_events("cache_read.active_support") { assert_equal "from another host", cache.read("key") }

    assert_equal :l2, first.first[:tier]
    assert_equal :l1, second.first[:tier]
  end

  def test_a_delete_reaches_both_tiers
    cache = two_tier_store
    cache.write("key", "value")
    assert cache.delete("key")

    assert_nil l2_store.read("key"), "memcached no longer holds it"
    assert_nil cache.read("key"), "nor does the host table"
  end

  def test_counters_live_in_memcached_and_are_shared_by_hosts
    host_a = two_tier_store
    host_b = build_store(l1: {path: File.join(@tmpdir, "other-host.l1")}, namespace: @namespace,
      memcached: {servers: Strata::TestSupport.memcached_servers})

    3.times { host_a.increment("hits") }
    2.times { host_b.increment("hits") }

    assert_equal 5, host_a.read("hits", raw: true).to_i
    assert_equal 6, host_b.increment("hits")
  end

  def test_an_unreachable_memcached_fails_open_to_the_host_table
    cache = build_store(namespace: @namespace, memcached: {servers: ["127.0.0.1:#{closed_port}"], connect_timeout: 0.2})

    reports = capture_reports do
      # False: memcached may still hold an older value once it is back. L1 takes it all the same.
      refute cache.write("key", "value")
      assert_equal "value", cache.read("key")
      assert_equal "fresh", cache.fetch("missing") { "fresh" }
    end

    refute_empty reports
    assert reports.all? { |report| report[:error].is_a?(Strata::TierError) }
    assert_equal [:l2], reports.map { |report| report[:context][:tier] }.uniq
  end

  # A key with spaces whose base64 form is over memcached's 250 bytes (here 240 bytes with the
  # namespace) is stored under its digest form: every operation works on it, nothing is reported.
  def test_long_keys_with_spaces_work_in_every_operation
    address = "1600 Amphitheatre Parkway, Mountain View, CA 94043, United States of America " * 3
    name = "geocode/#{address}".byteslice(0, 240 - @namespace.bytesize - 1)
    other = "geocode/\t#{address}".byteslice(0, 240 - @namespace.bytesize - 1)
    assert_equal 240, tier_key(l2_store, name).bytesize

    reports = capture_reports do
      [l2_store, two_tier_store].each do |cache|
        assert cache.write(name, "here"), cache.stack.tier_names.inspect
        assert_equal "here", cache.read(name)
        assert cache.exist?(name)
        assert_equal "here", cache.fetch(name) { flunk "fetch recomputed a cached key" }
        assert_equal "there", cache.fetch(other) { "there" }
        assert_equal({name => "here", other => "there"}, cache.read_multi(name, other))
        assert cache.delete(name)
        assert cache.delete(other)
        assert_nil cache.read(name)
        refute cache.exist?(other)
        assert_equal 3, cache.increment(name, 3)
        assert_equal 5, cache.increment(name, 2)
        assert cache.delete(name)
      end
    end
    assert_empty reports
    assert_nil l2_store.read(name), "the host table's copy went with the delete"
  end

  # memcached answers a multi-get with a value whose opaque names no key asked for (out of range,
  # or none): IndexError reached the app, or the value was served as the first key's. Now: misses,
  # one report naming the server, and the next read on a fresh connection. (A store per case: a
  # store reports a kind of failure once per outage.)
  def test_replies_out_of_step_are_misses_and_one_report
    bad = {"VA 5 O7\r\nwrong\r\n" => "out of range", "VA 5 t-1\r\nwrong\r\n" => "no opaque"}
    reply = nil
    scripted = Strata::TestSupport::ScriptedMemcached.new { |line, _data| reply if line.include?(":b ") }.start
    cache = nil
    bad.each do |line, what|
      reply = line
      cache = track(ActiveSupport::Cache::StrataStore.new(namespace: @namespace, memcached: {servers: [scripted.server]}))
      reports = capture_reports { assert_equal({}, cache.read_multi("a", "b"), what) }
      assert_equal 1, reports.size, what
      assert_kind_of Strata::Meta::ProtocolError, reports.first[:error]
      assert_equal scripted.server, reports.first[:error].server
    end
    assert_nil cache.read("c")
    assert_equal 3, scripted.connections, "each desync dropped its connection"
  ensure
    scripted&.stop
  end

  def test_memcached_needs_servers
    error = assert_raises(ArgumentError) { build_store(memcached: {}) }
    assert_match(/servers/, error.message)
  end

  private

  def l2_store
    @l2_store ||= track(ActiveSupport::Cache::StrataStore.new(namespace: @namespace,
      memcached: {servers: Strata::TestSupport.memcached_servers}))
  end

  def two_tier_store
    @two_tier_store ||= build_store(namespace: @namespace, memcached: {servers: Strata::TestSupport.memcached_servers})
  end

  def track(store)
    @stores << store
    store
  end

  # A loopback port nothing listens on: bound, noted, then closed.
  def closed_port
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end
end
