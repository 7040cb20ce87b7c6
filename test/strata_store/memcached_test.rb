# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "socket"

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
