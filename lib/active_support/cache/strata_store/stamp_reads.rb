# frozen_string_literal: true

require "active_support/cache"
require "strata/entry"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # What the store does with a current stamped entry (bytes) it read under key (#noted): the
      # computation under way in this fiber, if any, depends on its stamps too. A read of one of
      # the computation's own keys (fetch_multi's hits) is not its dependency, but the
      # computation around it, if any, used the value.
      #
      # Every tagged hit is a candidate, mostly outside any fetch block. So the store counts the
      # computations running in this process (#enter, #leave): while there are none, a hit looks
      # nothing up. A fiber with one running has entered it, and the count,
      # changed under a lock, is read as this thread last wrote it or later, so it is never 0
      # then. A count left above 0 (an interrupt between #enter and the ensure that leaves) only
      # costs the lookup. The stamps are unpacked only when a computation takes them.
      class StampReads
        # state_key: the store's fiber-local slot (its ExecutionState).
        def initialize(state_key)
          @state_key = state_key
          @lock = Mutex.new
          @running = 0
        end

        # A computation (ExecutionState#capture) is about to be current in this fiber.
        # (synchronize, not lock and unlock: an interrupt such as Rack::Timeout's Thread#raise
        # between those would leave the lock held, and every later read of the process waiting.)
        def enter
          @lock.synchronize { @running += 1 }
        end

        # One that entered is no longer current.
        def leave
          @lock.synchronize { @running -= 1 }
        end

        # Whether no computation is current in any fiber: nothing a read's stamps would be added
        # to (a read may then skip them: Stack#get_host_plain, #get_multi_plain).
        def idle?
          @running == 0
        end

        def call(key, bytes)
          return if @running == 0

          capture = Thread.current[@state_key]&.capture
          return unless capture

          words = Strata::Entry.stamp_words(bytes)
          capture.for?(key) ? capture.outer&.add(words) : capture.add(words)
        end
      end
    end
  end
end
