# frozen_string_literal: true

require "strata/clock"
require "strata/strata_ext"

module Strata
  class ResourcePool
    # One process's resources: at most size of them, made on demand, handed out last-in first-out
    # and given back.
    #
    # Why not connection_pool's TimedStack: its pop and push each read the clock, pass an options
    # Hash through four methods and broadcast, 0.8 us per checkout of a 24 us memcached get. Here
    # a checkout and its return are one Mutex section each around an Array (0.3-0.4 us for both);
    # the clock is read only when nothing is idle. Its errors are ResourcePool's (TimeoutError,
    # ShuttingDownError).
    #
    # Last in, first out, as TimedStack: a lone caller keeps reusing one resource. For SQLite that
    # matters: a connection's page cache is dropped whenever another connection wrote since its
    # last transaction, so rotating through the pool would read every page afresh.
    #
    # Concurrency: thread-safe. Resources are made and closed outside the lock (both may do I/O).
    # #take and #give are not interrupt-safe by themselves: ResourcePool#with holds interrupts off
    # around them. #lend, in C (ext/strata/stock_lend.h), is: it yields an idle resource and gives
    # it back, or declines with UNLENT when none is idle or a thread holds the lock.
    class Stock
      # size: resources at most; create: makes one.
      def initialize(size, create)
        @size = size
        @create = create
        @idle = []
        @lock = Mutex.new
        @given_back = ConditionVariable.new
        @made = 0
        @closer = nil
      end

      # The resource given back last, a new one while fewer than size exist, or one given back
      # within timeout seconds. Raises ResourcePool::TimeoutError after that, and
      # ResourcePool::ShuttingDownError once #shutdown has run.
      def take(timeout)
        # lock and unlock rather than synchronize: a return out of a block unwinds like an
        # exception, which cost more than the rest of the checkout.
        @lock.lock
        begin
          resource = @idle.pop || wait_or_reserve(timeout)
        ensure
          @lock.unlock
        end
        resource || make
      end

      # Gives a taken resource back: to the next taker, or to the closer after #shutdown.
      def give(resource)
        @lock.lock
        begin
          closer = @closer
          @idle.push(resource) unless closer
          @given_back.signal
        ensure
          @lock.unlock
        end
        closer&.call(resource)
        nil
      end

      # #give for #lend's return path when it can't push the resource itself (the lock is held,
      # or the pool is shut down): it waits for the lock with interrupts held off, so none can
      # drop the resource on the way.
      def give_back_held(resource)
        Thread.handle_interrupt(ResourcePool::HOLD_INTERRUPTS) { give(resource) }
      end

      # Closes every idle resource with the block, and each busy one as it is given back; #take
      # raises ShuttingDownError from now on.
      def shutdown(&closer)
        idle = @lock.synchronize do
          @closer = closer
          @given_back.broadcast
          @idle.slice!(0..)
        end
        idle.each(&closer)
        nil
      end

      private

      # Under @lock, with nothing idle: a resource given back within timeout seconds, or nil
      # after reserving a place for a new one (the caller makes it, without the lock).
      def wait_or_reserve(timeout)
        deadline = Clock.monotonic + timeout
        loop do # bound: each pass returns, raises, or waits until the deadline
          raise ShuttingDownError if @closer

          resource = @idle.pop
          return resource if resource
          if @made < @size
            @made += 1
            return nil
          end

          left = deadline - Clock.monotonic
          raise TimeoutError, "no resource given back within #{timeout}s" if left <= 0

          @given_back.wait(@lock, left)
        end
      end

      def make
        resource = @create.call
        made = true
        resource
      ensure
        unless made # whatever stopped it, the place reserved for it is free again
          @lock.synchronize do
            @made -= 1
            @given_back.signal
          end
        end
      end
    end
  end
end
