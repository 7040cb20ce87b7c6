# frozen_string_literal: true

require "strata/clock"
require "strata/errors"

module Strata
  # Changes the durable tier (the versions' authority, the SQL tier) missed: it was down or out
  # of reach, so the call returned false, and it still holds what the change replaced. Left
  # so, every host would serve that again once the copies above lapse, for good. They are made
  # again, in a thread of their own, every INTERVAL seconds until the tier takes them or
  # GIVE_UP seconds pass since the first of them failed (reported):
  #
  # - a tag bump (invalidate_tags) is bumped again (new versions, as any bump: a tag bumped
  #   twice only misses once more);
  # - a key whose write or delete the tier missed is deleted there (Stack#redelete): whatever
  #   value it held is gone, and the key misses everywhere until it is written again. A write
  #   is not made again: by the time the tier is back, its value may be older than the data.
  #
  # On the SQL tier with the invalidation log, both append their log rows, so other hosts drop
  # their copies through their pollers. At most MAX_PENDING tags and as many keys are kept (the
  # oldest go first, reported).
  #
  # They are this process's: a process that exits before the tier is back takes them with it
  # (docs/coherence.md, "The ordering rule"). A forked child keeps its parent's and makes them
  # too (twice costs misses only).
  class Retries
    INTERVAL = 0.5
    GIVE_UP = 600
    MAX_PENDING = 10_000

    # stack: the Strata::Stack whose durable tier missed the changes. on_error: called as
    # on_error.call(error, :poller) for what is given up.
    def initialize(stack, on_error:)
      @stack = stack
      @on_error = on_error
      @lock = Mutex.new
      @tags = {} # tag id => true, oldest first
      @keys = {} # key => true, oldest first
      @since = nil
      @thread = nil
    end

    # Keeps tag ids to bump again.
    def add_tags(ids)
      add(@tags, ids)
    end

    # Keeps keys to delete again.
    def add_keys(keys)
      add(@keys, keys)
    end

    # [tag ids, keys] waiting.
    def pending
      @lock.synchronize { [@tags.keys, @keys.keys] }
    end

    # Stops the thread (what waits stays); for the store's close.
    def stop
      thread = @lock.synchronize { @thread.tap { @thread = nil } }
      thread&.kill
      nil
    end

    private

    def add(into, items)
      @lock.synchronize do
        items.each { |item| into[item] = true }
        into.shift while into.size > MAX_PENDING
        @since ||= Clock.monotonic
        start unless @thread&.alive?
      end
      nil
    end

    # Under @lock.
    def start
      @thread = Thread.new { run }
      @thread.name = "strata-retries"
      @thread.report_on_exception = false
    end

    # Bound: until nothing is left, or GIVE_UP seconds after the first failed.
    def run
      loop do
        sleep INTERVAL
        tags, keys = pending
        undone_tags = []
        @stack.dependencies.bump(tags, undone_tags) unless tags.empty?
        undone_keys = keys.empty? ? keys : @stack.redelete(keys)
        break unless settle(tags, undone_tags, keys, undone_keys)
      end
    end

    # Keeps what is still undone; false when nothing is left or the rest is given up.
    def settle(tags, undone_tags, keys, undone_keys)
      given_up = nil
      left = @lock.synchronize do
        tags.each { |id| @tags.delete(id) unless undone_tags.include?(id) }
        keys.each { |key| @keys.delete(key) unless undone_keys.include?(key) }
        waiting = @tags.size + @keys.size
        if waiting > 0 && Clock.monotonic - @since > GIVE_UP
          given_up = waiting
          @tags.clear
          @keys.clear
        end
        if @tags.empty? && @keys.empty?
          @since = nil
          @thread = nil
        end
        !(@tags.empty? && @keys.empty?)
      end
      if given_up
        @on_error.call(TierError.new("#{given_up} changes did not reach the durable tier in #{GIVE_UP} s and are given up"),
          :poller)
      end
      left
    end
  end
end
