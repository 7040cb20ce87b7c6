# frozen_string_literal: true

require "strata/errors"
require "strata/fork_generation"
require "strata/resource_pool/stock"

module Strata
  # A pool of connections for this process: at most size of them, made on demand by the block
  # given to new, kept in a Stock (resource_pool/stock.rb).
  #
  # #with checks one out the way ConnectionPool#with does: interrupts (Timeout, Thread#raise) are
  # held off while a connection changes hands, so none can leak one, and let through while it is
  # in use. It leaves out #with's per-thread reentrant checkout, which our callers never need,
  # and which cost 1.5 us of a 35 us memcached get. When a connection is idle it is lent by
  # Stock#lend (in C, ext/strata/stock_lend.h), which gives the same guarantee without the two
  # Thread.handle_interrupt blocks: those cost more CPU than the rest of the client's work on a
  # memcached set.
  #
  # Fork: a forked child starts with an empty pool. The parent's connections stay the parent's:
  # the child neither uses nor closes them, and keeps them referenced so that no finalizer
  # closes them either (SQLite must not close in a child a handle its parent opened).
  class ResourcePool
    # No connection was free and none was given back within the pool's timeout. Callers turn it
    # into a Strata::RetryableError naming their tier and server.
    class TimeoutError < Strata::Error; end

    # #shutdown ran while a caller waited for a connection; #with takes one from the next pool.
    class ShuttingDownError < Strata::Error; end

    HOLD_INTERRUPTS = {Exception => :never}.freeze
    LET_INTERRUPTS = {Exception => :immediate}.freeze

    # size: connections at most; timeout: seconds to wait for a free one before
    # TimeoutError; create: makes a connection.
    def initialize(size:, timeout:, &create)
      raise ArgumentError, "a ResourcePool needs a block that makes a connection" unless create

      @size = size
      @timeout = timeout
      @create = create
      @lock = Mutex.new
      @stock = nil
      @generation = nil
      @inherited = [] # stocks of the processes this one was forked from
    end

    # Yields a connection, and returns the block's value.
    def with(&)
      stock = current_stock
      lent = stock.lend(&)
      return lent unless Stock::UNLENT.equal?(lent)

      Thread.handle_interrupt(HOLD_INTERRUPTS) do
        conn = begin
          stock.take(@timeout)
        rescue ShuttingDownError
          stock = current_stock # #shutdown ran meanwhile: the next pool serves
          stock.take(@timeout)
        end
        begin
          Thread.handle_interrupt(LET_INTERRUPTS) { yield conn }
        ensure
          stock.give(conn)
        end
      end
    end

    # Closes every idle connection with the block, and each busy one as it is given back; the
    # next #with starts a fresh pool.
    def shutdown(&close)
      stock = @lock.synchronize do
        current = @stock
        @stock = nil
        current
      end
      stock&.shutdown(&close)
      nil
    end

    private

    # Lock-free once the stock exists: the hot path reads two instance variables.
    def current_stock
      stock = @stock
      return stock if stock && @generation == ForkGeneration.current

      @lock.synchronize do
        if @stock.nil? || @generation != ForkGeneration.current
          @inherited << @stock if @stock && @generation != ForkGeneration.current
          @stock = Stock.new(@size, @create)
          @generation = ForkGeneration.current
        end
        @stock
      end
    end
  end
end
