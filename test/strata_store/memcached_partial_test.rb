# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "support/memcached_process"

# read_multi and write_multi over a store whose memcached has two servers, one of them killed:
# the keys on the healthy server are still served (and backfilled into L1) or written, the
# failure is reported, and nothing raises into the caller.
class StrataStoreMemcachedPartialTest < Strata::StoreCase
  def setup
    @doomed = Strata::TestSupport::MemcachedProcess.new.start
    @survivor = Strata::TestSupport::MemcachedProcess.new.start
  end

  def teardown
    @doomed.kill
    @survivor.kill
  end

  def test_read_multi_serves_the_healthy_servers_keys_when_one_server_dies
    cache = build_store(memcached: {servers: [@doomed.server, @survivor.server], timeout: 0.3, connect_timeout: 0.3})
    client = cache.stack[:l2].client
    names = Array.new(40) { |i| "partial-#{SecureRandom.hex(4)}-#{i}" }
    names.each { |name| cache.write(name, "v-#{name}") }
    kept = names.select { |name| client.ring.server_for(tier_key(cache, name)) == @survivor.server }
    refute_empty kept
    refute_equal names.size, kept.size

    fresh = build_store(l1: {path: File.join(@tmpdir, "other-host.strata")},
      memcached: {servers: [@doomed.server, @survivor.server], timeout: 0.3, connect_timeout: 0.3})
    @doomed.kill
    reports = capture_reports do
      assert_equal kept.to_h { |name| [name, "v-#{name}"] }, fresh.read_multi(*names)
    end
    refute_empty reports
    assert_kind_of Strata::PartialError, reports.first[:error]
    assert fresh.stack[:l1].get(tier_key(fresh, kept.first)), "the healthy server's hits are backfilled into L1"
  end

  def test_write_multi_writes_the_other_tiers_and_the_healthy_server_when_one_server_dies
    cache = build_store(memcached: {servers: [@doomed.server, @survivor.server], timeout: 0.3, connect_timeout: 0.3},
      sql: {path: File.join(@tmpdir, "l3.sqlite3")})
    client = cache.stack[:l2].client
    names = Array.new(40) { |i| "wm-#{SecureRandom.hex(4)}-#{i}" }
    keys = names.map { |name| tier_key(cache, name) }
    @doomed.kill

    reports = capture_reports { cache.write_multi(names.to_h { |name| [name, "v-#{name}"] }) }
    assert_kind_of Strata::PartialError, reports.first[:error]
    assert_equal 40, cache.stack[:l3].get_multi(keys).size, "SQL holds every entry"
    assert_equal 40, cache.stack[:l1].get_multi(keys).size, "L1 holds every entry"
    on_survivor = keys.select { |key| client.ring.server_for(key) == @survivor.server }
    refute_empty on_survivor
    assert_equal on_survivor.sort, cache.stack[:l2].get_multi(on_survivor).keys.sort
    assert_equal names.to_h { |name| [name, "v-#{name}"] }, cache.read_multi(*names)
  end
end
