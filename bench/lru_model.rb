# frozen_string_literal: true

module Strata
  module Bench
    # An exact LRU over a byte budget, the yardstick for L1's hit ratio. A Ruby Hash keeps insertion
    # order, so re-inserting on a hit makes the first entry the least recently used.
    # An entry costs its key bytes plus its value bytes, nothing else.
    class LruModel
      def initialize(budget_bytes)
        @budget = budget_bytes
        @sizes = {}
        @bytes = 0
      end

      # true on a hit, which makes key the most recently used.
      def get(key)
        size = @sizes.delete(key) or return false
        @sizes[key] = size
        true
      end

      # Store key with `size` bytes, then evict from the old end until within budget.
      # Each eviction removes one entry, so this loops at most once per entry held.
      def set(key, size)
        old = @sizes.delete(key)
        @bytes -= old if old
        return false if size > @budget

        @sizes[key] = size
        @bytes += size
        while @bytes > @budget
          _, evicted = @sizes.shift
          @bytes -= evicted
        end
        true
      end
    end
  end
end
