# frozen_string_literal: true

require "delegate"

module Strata
  module TestSupport
    # A real tier with one pause point, so a test can stop a caller right after a read or a write
    # and run something else before it goes on: a deterministic interleaving, not a sleep race.
    #
    #   l3 = PausingTier.new(sql_tier)
    #   reached, release = l3.pause_after(:get)
    #   reader = Thread.new { stack.get(key, nil, fill) }
    #   reached.pop     # the reader has read l3 and waits
    #   stack.delete(key)
    #   release << true # the reader goes on
    class PausingTier < SimpleDelegator
      # Two queues: the next call of operation (:get, :peek, :lease_get, :set, :add_for_fill,
      # :delete or :invalidate) pushes to the first once the tier has answered, then waits on
      # the second. A caller paused may be paused again later: arm the next pause before
      # releasing it.
      def pause_after(operation)
        @operation = operation
        @gate = [Queue.new, Queue.new]
      end

      def get(key)
        paused(:get) { __getobj__.get(key) }
      end

      def peek(key)
        paused(:peek) { __getobj__.peek(key) }
      end

      def lease_get(key, lease_ttl:)
        paused(:lease_get) { __getobj__.lease_get(key, lease_ttl: lease_ttl) }
      end

      # A read-through's read of a tier with tombstones pauses as a get.
      def get_for_fill(key)
        paused(:get) { __getobj__.get_for_fill(key) }
      end

      def add_for_fill(key, bytes, token, ttl: nil)
        paused(:add_for_fill) { __getobj__.add_for_fill(key, bytes, token, ttl: ttl) }
      end

      def set(key, bytes, ttl: nil)
        paused(:set) { __getobj__.set(key, bytes, ttl: ttl) }
      end

      def delete(key)
        paused(:delete) { __getobj__.delete(key) }
      end

      def invalidate(key)
        paused(:invalidate) { __getobj__.invalidate(key) }
      end

      private

      def paused(operation)
        result = yield
        gate = @gate
        if gate && @operation == operation
          @gate = nil
          gate.first << true
          gate.last.pop
        end
        result
      end
    end
  end
end
