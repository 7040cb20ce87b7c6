# frozen_string_literal: true

require "test_helper"

# The table's hot path must not disturb Ruby's method and constant caches: no class or singleton
# class created, no constant or class variable redefined, per operation. RubyVM.stat counts those
# events (global_constant_state and class_serial on 3.1; constant_cache_invalidations and shape
# counters on later versions), so after a warm-up it must not move across many operations.
class SharedMemoryVmStatTest < Minitest::Test
  OPERATIONS = 10_000

  def test_operations_leave_vm_caches_alone
    Strata::TestSupport.with_tmpdir do |dir|
      table = Strata::Tiers::SharedMemory.new(path: File.join(dir, "vm.strata"), size: 16 * 1024 * 1024)
      keys = Array.new(64) { |i| "vm-key-#{i}" }
      values = Array.new(8) { |i| "v" * (i * 97) }
      run_mix(table, keys, values, 2_000) # warm-up: every branch taken at least once
      before = Strata::TestSupport.vm_cache_state
      run_mix(table, keys, values, OPERATIONS)
      after = Strata::TestSupport.vm_cache_state
      assert_equal before, after, "RubyVM.stat moved across #{OPERATIONS} operations"
      table.close
    end
  end

  private

  # A fixed mix of hits, misses, writes, deletes, counters and multi-gets.
  def run_mix(table, keys, values, count)
    count.times do |i|
      key = keys[i % keys.size]
      case i % 10
      when 0, 1, 2 then table.get(key)
      when 3 then table.get("vm-absent-#{i % 7}")
      when 4, 5 then table.set(key, values[i % values.size])
      when 6 then table.delete(keys[(i * 7) % keys.size])
      when 7 then table.incr("vm-counter-#{i % 3}", 1, initial: 0)
      when 8 then table.get_multi(keys.first(4))
      else table.add(key, values[0])
      end
    end
  end
end
