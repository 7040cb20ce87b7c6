# frozen_string_literal: true

require_relative "store_case"
require "securerandom"

# delete_matched deletes only where it can see every key (L1 and SQL list theirs): with memcached
# in the stack it raises NotImplementedError, as MemCacheStore does, rather than count deletions
# while memcached keeps the keys to refill L1 with. A String matcher is a glob, as with
# RedisCacheStore.
class StrataStoreDeleteMatchedTest < Strata::StoreCase
  def setup
    @namespace = "dm-#{SecureRandom.hex(6)}"
  end

  def test_with_memcached_in_the_stack_it_raises_and_deletes_nothing
    [{memcached: memcached}, {l1: {path: table_path, size: TABLE_SIZE}, memcached: memcached}].each do |tiers|
      cache = track(ActiveSupport::Cache::StrataStore.new(namespace: @namespace, **tiers))
      cache.write("views/1", 1)

      error = assert_raises(NotImplementedError) { cache.delete_matched(/views/) }
      assert_match(/delete_matched.*l2/, error.message)
      assert_equal 1, cache.read("views/1")
    end
  end

  def test_the_sql_tier_lists_its_keys_so_a_key_only_it_holds_is_deleted_too
    cache = build_store(sql: {path: File.join(@tmpdir, "l3.sqlite3")}, namespace: @namespace)
    cache.write("views/1", 1)
    cache.write("views/2", 2)
    cache.write("other", 3)
    cache.write("views/gone", 4, expires_in: 60)
    cache.delete("views/gone") # a tombstone row, not a live key
    cache.stack[:l1].delete(tier_key(cache, "views/2")) # evicted from L1: only SQL holds it

    assert_equal 2, cache.delete_matched(/views/)
    assert_nil cache.read("views/2")
    assert_nil cache.read("views/1")
    assert_equal 3, cache.read("other")
  end

  def test_the_sql_tier_alone_pages_through_its_keys
    cache = track(ActiveSupport::Cache::StrataStore.new(sql: {path: File.join(@tmpdir, "l3.sqlite3")}, namespace: @namespace))
    count = Strata::Tiers::SQL::Statements::KEYS_PAGE + 5
    cache.write_multi((1..count).to_h { |n| ["views/#{n}", n] })
    cache.write("other", 0)

    assert_equal count, cache.delete_matched("views/*")
    assert_equal({"other" => 0}, cache.read_multi("views/1", "views/#{count}", "other"))
  end

  def test_a_string_is_a_glob_on_the_key_without_the_namespace
    cache = build_store(namespace: "app*[1]")
    cache.write("views/1", 1)
    cache.write("views/2", 2)
    cache.write("models/views/3", 3)

    assert_equal 2, cache.delete_matched("views/*")
    assert_equal({"models/views/3" => 3}, cache.read_multi("views/1", "views/2", "models/views/3"))
    assert_equal 1, cache.delete_matched("*/views/?")
  end

  def test_the_local_cache_forgets_the_matched_keys
    cache = build_store(namespace: @namespace)
    cache.with_local_cache do
      cache.write("views/1", 1)
      cache.write("other", 2)
      cache.delete_matched("views/*")

      assert_nil cache.read("views/1")
      assert_equal 2, cache.read("other")
    end
  end

  private

  def memcached
    {servers: Strata::TestSupport.memcached_servers, timeout: 2}
  end

  def track(cache)
    @stores << cache
    cache
  end
end
