# frozen_string_literal: true

module Strata
  class VMWatch
    # Which RubyVM.stat counters mean "a VM cache was invalidated", read as plain Integers.
    #
    # The keys differ by Ruby version, so the list is whatever this Ruby exposes minus the
    # counters known to move for other reasons:
    # - 3.1: global_constant_state (a constant defined or removed: every inline constant cache
    #   goes), class_serial (a class, module or singleton class created), global_cvar_state.
    #   Method caches are per class since 3.0, so a plain `def` moves nothing here.
    # - 3.2+: constant_cache_invalidations replaces global_constant_state (constant caches are
    #   invalidated by name); constant_cache_misses, next_shape_id and shape_cache_size are
    #   informational (a first lookup, a new object shape) and left out.
    #   class_serial is gone (inline caches key on object shapes), so creating a class or a
    #   singleton class (OpenStruct.new) is no longer counted at all; include and extend still
    #   move global_cvar_state.
    # - 2.x: global_method_state as well, kept if present.
    module Counters
      # Counters that move without invalidating anything.
      INFORMATIONAL = %i[constant_cache_misses next_shape_id shape_cache_size].freeze
      # Integer counters only: a Ruby 3.2 preview answered a Hash for :constant_cache.
      KEYS = (RubyVM.stat.select { |_, value| value.is_a?(Integer) }.keys - INFORMATIONAL).freeze

      module_function

      # The counters now, as an Array in KEYS order. RubyVM.stat(key) answers one Integer and
      # builds no Hash.
      def read
        KEYS.map { |key| RubyVM.stat(key) }
      end

      # {key => growth} for the counters that moved between two reads; {} when none did.
      def delta(before, after)
        moved = {}
        KEYS.each_with_index do |key, i|
          growth = after[i] - before[i]
          moved[key] = growth unless growth.zero?
        end
        moved
      end

      # Element-wise after - before, as an Array (the tracer's arithmetic).
      def difference(after, before)
        after.each_with_index.map { |value, i| value - before[i] }
      end

      def sum(counts, more)
        counts.each_with_index.map { |value, i| value + more[i] }
      end
    end
  end
end
