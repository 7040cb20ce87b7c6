# frozen_string_literal: true

require "test_helper"
require "securerandom"
require "strata/tiers/memcached"

# The memcached tier's hot path must not disturb Ruby's method and constant caches (see
# shared_memory_vm_stat_test.rb): RubyVM.stat must not move across many operations once warm.
class MemcachedVmStatTest < Minitest::Test
  OPERATIONS = 10_000

  def test_operations_leave_vm_caches_alone
    tier = Strata::Tiers::Memcached.new(servers: Strata::TestSupport.memcached_servers, timeout: 2)
    prefix = "vm-#{SecureRandom.hex(6)}-"
    keys = Array.new(64) { |i| "#{prefix}#{i}" }
    values = Array.new(8) { |i| "v" * (i * 97) }
    run_mix(tier, prefix, keys, values, 2_000) # warm-up: every branch taken at least once
    before = Strata::TestSupport.vm_cache_state
    run_mix(tier, prefix, keys, values, OPERATIONS)
    after = Strata::TestSupport.vm_cache_state
    assert_equal before, after, "RubyVM.stat moved across #{OPERATIONS} operations"
  ensure
    tier&.close
  end

  private

  def run_mix(tier, prefix, keys, values, count)
    count.times do |i|
      key = keys[i % keys.size]
      case i % 10
      when 0, 1, 2 then tier.get(key)
      when 3 then tier.get("#{prefix}absent-#{i % 7}")
      when 4, 5 then tier.set(key, values[i % values.size])
      when 6 then tier.delete(keys[(i * 7) % keys.size])
      when 7 then tier.incr("#{prefix}counter-#{i % 3}", 1, initial: 0)
      when 8 then tier.get_multi(keys.first(4))
      else tier.lease_get(key, lease_ttl: 5)
      end
    end
  end
end
