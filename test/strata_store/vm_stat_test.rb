# frozen_string_literal: true

require_relative "store_case"

# The store's steady state must not bust Ruby's method or constant caches: no new classes, methods,
# singleton classes or constants per call. RubyVM.stat counts each of those.
class StrataStoreVmStatTest < Strata::StoreCase
  OPERATIONS = 10_000

  def test_mixed_operations_leave_ruby_vm_stat_unchanged
    cache = build_store(namespace: "app")
    workload(cache, 1_000) # warm every path: first calls fill inline caches and create shapes
    before = Strata::TestSupport.vm_cache_state

    workload(cache, OPERATIONS)

    assert_equal before, Strata::TestSupport.vm_cache_state
  end

  # The same over all three tiers: read-through with the host lock and memcached leases, fills,
  # settle checks, and the SQL tier's statements.
  def test_mixed_operations_on_every_tier_leave_ruby_vm_stat_unchanged
    cache = build_store(namespace: "vm-#{Process.pid}-#{rand(1 << 30)}",
      memcached: {servers: Strata::TestSupport.memcached_servers, timeout: 2},
      sql: {path: File.join(@tmpdir, "l3.sqlite3")})
    workload(cache, 1_000)
    before = Strata::TestSupport.vm_cache_state

    workload(cache, OPERATIONS)

    assert_equal before, Strata::TestSupport.vm_cache_state
  end

  private

  TAGS = %w[vm/a vm/b vm/c vm/d].freeze

  def workload(cache, operations)
    operations.times do |i|
      key = "key#{i % 50}"
      case i % 10
      # tagged: hits (their stamps checked in the host table's read), nested fetches, invalidations
      when 8 then cache.fetch("tagged-#{i % 3}", tags: TAGS) { cache.fetch("inner-#{i % 3}", tags: TAGS.first(1)) { i } }
      when 9 then (i % 100 == 9) ? cache.invalidate_tags(TAGS.last) : cache.fetch("tagged-#{i % 3}", tags: TAGS) { i }
      when 0 then cache.write(key, "value #{i}")
      when 1 then cache.read(key)
      when 2 then cache.fetch(key) { [i, "computed"] }
      when 3 then cache.fetch("counter-#{i % 5}", raw: true) { i }
      when 4 then cache.increment("counter-#{i % 5}")
      when 5 then cache.delete(key)
      when 6 then cache.read_multi(key, "key#{(i + 1) % 50}")
      else cache.write(key, {i: i}, expires_in: 60, version: "v1")
      end
    end
  end
end
