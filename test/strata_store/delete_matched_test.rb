# frozen_string_literal: true

require_relative "store_case"
require "securerandom"

# delete_matched deletes only where it can see every key: with a tier that can't list its keys in
# the stack (memcached; the SQL tier, for now) it raises NotImplementedError, as MemCacheStore
# does, rather than count deletions while that tier keeps the keys to refill L1 with. A String
# matcher is a glob, as with RedisCacheStore.
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

  def test_with_the_sql_tier_in_the_stack_it_raises
    cache = build_store(sql: {path: File.join(@tmpdir, "l3.sqlite3")}, namespace: @namespace)
    cache.write("views/1", 1)

    error = assert_raises(NotImplementedError) { cache.delete_matched(/views/) }
    assert_match(/\(l3\)/, error.message)
    assert_equal 1, cache.read("views/1")
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
