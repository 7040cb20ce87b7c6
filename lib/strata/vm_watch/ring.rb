# frozen_string_literal: true

module Strata
  class VMWatch
    # The last few Reports, newest last, for a page to show. Bounded: pushing past capacity drops
    # the oldest. Thread-safe; the lock is held only to copy an Array.
    class Ring
      DEFAULT_CAPACITY = 100

      attr_reader :capacity

      def initialize(capacity = DEFAULT_CAPACITY)
        raise ArgumentError, "capacity must be a positive Integer, got #{capacity.inspect}" unless capacity.is_a?(Integer) && capacity.positive?

        @capacity = capacity
        @reports = []
        @lock = Mutex.new
      end

      def push(report)
        @lock.synchronize do
          @reports.shift if @reports.size == @capacity
          @reports << report
        end
        self
      end

      def to_a
        @lock.synchronize { @reports.dup }
      end

      def clear
        @lock.synchronize { @reports.clear }
        self
      end
    end
  end
end
