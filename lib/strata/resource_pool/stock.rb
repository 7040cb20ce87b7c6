# frozen_string_literal: true

require "connection_pool"

module Strata
  class ResourcePool
    # One process's resources: at most size of them, made on demand, handed out and given back.
    #
    # Why not connection_pool's TimedStack: its pop and push each take a Mutex, read the clock and
    # broadcast a ConditionVariable, 0.8 us per checkout of a 24 us memcached get. Here an idle
    # resource waits in a Thread::Queue, whose non-blocking pop and push are single C calls
    # (0.08 us for both); the Mutex and ConditionVariable serve only callers that find none idle.
    # Errors stay connection_pool's (TimeoutError, PoolShuttingDownError), which callers rescue.
    #
    # Concurrency: thread-safe. A taker that finds nothing idle counts itself in @waiting, under
    # @lock, before it looks at the queue again; a giver reads @waiting after its push. So either
    # the taker sees the resource, or the giver sees the taker and signals it under @lock (which
    # the taker holds until it waits): no wakeup is lost.
    #
    # Not interrupt-safe by itself: ResourcePool#with holds interrupts off around #take and #give.
    class Stock
      # size: resources at most; create: makes one (called outside @lock).
      def initialize(size, create)
        @size = size
        @create = create
        @idle = Thread::Queue.new
        @lock = Mutex.new
        @given_back = ConditionVariable.new
        @made = 0
        @waiting = 0
        @closer = nil
      end

      # An idle resource, a new one while fewer than size exist, or one given back within
      # timeout seconds. Raises ConnectionPool::TimeoutError after that, and
      # ConnectionPool::PoolShuttingDownError once #shutdown has run.
      def take(timeout)
        idle || take_slowly(timeout)
      end

      # Gives a taken resource back: to the next taker, or to the closer after #shutdown.
      def give(resource)
        @idle.push(resource)
        # A shutdown that ran before the push has drained the queue already: drain it again.
        return close_idle if @closer

        @lock.synchronize { @given_back.signal } if @waiting.positive?
      end

      # Closes every idle resource with the block, and each busy one as it is given back; #take
      # raises PoolShuttingDownError from now on.
      def shutdown(&closer)
        @lock.synchronize do
          @closer = closer
          @given_back.broadcast
        end
        close_idle
      end

      private

      def idle
        @idle.pop(true) unless @idle.empty?
      rescue ThreadError
        nil # another thread took the last one between the check and the pop
      end

      def take_slowly(timeout)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
        @lock.synchronize do
          @waiting += 1
          begin
            loop do # bound: each pass waits, or ends with a resource or an error
              raise ConnectionPool::PoolShuttingDownError if @closer

              resource = idle
              return resource if resource
              break if @made < @size

              left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
              raise ConnectionPool::TimeoutError, "no resource given back within #{timeout}s" if left <= 0

              @given_back.wait(@lock, left)
            end
            @made += 1 # reserved here, made below without the lock
          ensure
            @waiting -= 1
          end
        end
        make
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

      def close_idle
        while (resource = idle) # bound: the queue only shrinks once @closer is set
          @closer.call(resource)
        end
        nil
      end
    end
  end
end
