# frozen_string_literal: true

require "connection_pool"
require "strata/fork_generation"

module Strata
  # A pool of connections for this process, on connection_pool's TimedStack: at most size of
  # them, made on demand by the block given to new.
  #
  # #with checks one out the way ConnectionPool#with does: interrupts (Timeout, Thread#raise) are
  # held off while a connection changes hands, so none can leak one, and let through while it is
  # in use. It leaves out #with's per-thread reentrant checkout, which our callers never need,
  # and which cost 1.5 us of a 35 us memcached get.
  #
  # Fork: a forked child starts with an empty pool. The parent's connections stay the parent's:
  # the child neither uses nor closes them, and keeps them referenced so that no finalizer
  # closes them either (SQLite must not close in a child a handle its parent opened).
  class ResourcePool
    HOLD_INTERRUPTS = {Exception => :never}.freeze
    LET_INTERRUPTS = {Exception => :immediate}.freeze
    # TimedStack#pop and #push default their options to a new Hash on every call.
    NO_OPTIONS = {}.freeze

    # size: connections at most; timeout: seconds to wait for a free one before
    # ConnectionPool::TimeoutError; create: makes a connection.
    def initialize(size:, timeout:, &create)
      raise ArgumentError, "a ResourcePool needs a block that makes a connection" unless create

      @size = size
      @timeout = timeout
      @create = create
      @lock = Mutex.new
      @stack = nil
      @generation = nil
      @inherited = [] # stacks of the processes this one was forked from
    end

    # Yields a connection, and returns the block's value.
    def with
      stack = current_stack
      Thread.handle_interrupt(HOLD_INTERRUPTS) do
        conn = begin
          stack.pop(@timeout, NO_OPTIONS)
        rescue ConnectionPool::PoolShuttingDownError
          stack = current_stack # #shutdown ran meanwhile: the next pool serves
          stack.pop(@timeout, NO_OPTIONS)
        end
        begin
          Thread.handle_interrupt(LET_INTERRUPTS) { yield conn }
        ensure
          stack.push(conn, NO_OPTIONS)
        end
      end
    end

    # Closes every idle connection with the block, and each busy one as it is given back; the
    # next #with starts a fresh pool.
    def shutdown(&close)
      stack = @lock.synchronize do
        current = @stack
        @stack = nil
        current
      end
      stack&.shutdown(&close)
      nil
    end

    private

    # Lock-free once the stack exists: the hot path reads two instance variables.
    def current_stack
      stack = @stack
      return stack if stack && @generation == ForkGeneration.current

      @lock.synchronize do
        if @stack.nil? || @generation != ForkGeneration.current
          @inherited << @stack if @stack && @generation != ForkGeneration.current
          @stack = ConnectionPool::TimedStack.new(@size, &@create)
          @generation = ForkGeneration.current
        end
        @stack
      end
    end
  end
end
