# frozen_string_literal: true

require "strata/clock"
require "strata/errors"

module Strata
  # Tag bumps that did not reach the versions' authority (the bottom tier: the SQL tier down or
  # out of reach when invalidate_tags ran, which then returned false). Left so, the authority
  # keeps the old versions: once the copies above lapse, every host serves the entries built
  # before the invalidation again, for good. So they are bumped again, in a thread of their own,
  # every INTERVAL seconds until the authority takes them (each attempt draws new versions, as
  # any bump does: a tag bumped twice only misses once more) or GIVE_UP seconds pass since the
  # first of them failed (reported). On the authority they append their log rows, so other
  # hosts see them through their pollers as any bump. At most MAX_IDS tags are kept (the oldest
  # go first, reported).
  #
  # The tags are this process's: a process that exits before the authority is back takes them
  # with it (docs/coherence.md, "The ordering rule"). A forked child keeps its parent's and
  # retries them too (a bump made twice costs misses only).
  class BumpRetries
    INTERVAL = 0.5
    GIVE_UP = 600
    MAX_IDS = 10_000

    # dependencies: the stack's Strata::Dependencies. on_error: called as
    # on_error.call(error, :poller) for what is given up.
    def initialize(dependencies, on_error:)
      @dependencies = dependencies
      @on_error = on_error
      @lock = Mutex.new
      @ids = {} # tag id => true, oldest first
      @since = nil
      @thread = nil
    end

    # Keeps tag ids for the retry thread, and starts it if it is not running (in this process).
    def add(ids)
      @lock.synchronize do
        ids.each { |id| @ids[id] = true }
        @since ||= Clock.monotonic
        @ids.shift while @ids.size > MAX_IDS
        @thread = Thread.new { run } unless @thread&.alive?
      end
      nil
    end

    # The tag ids waiting for a retry.
    def pending
      @lock.synchronize { @ids.keys }
    end

    # Stops the thread (the tags stay); for the store's close.
    def stop
      thread = @lock.synchronize { @thread.tap { @thread = nil } }
      thread&.kill
      nil
    end

    private

    # Bound: until no tag is left, or GIVE_UP seconds after the first failed.
    def run
      Thread.current.name = "strata-bump-retries"
      Thread.current.report_on_exception = false
      loop do
        sleep INTERVAL
        ids = pending
        break if ids.empty?

        undone = []
        @dependencies.bump(ids, undone)
        break unless settle(ids, undone)
      end
    end

    # Keeps what is still undone; false when nothing is left or the run is given up.
    def settle(tried, undone)
      given_up = nil
      left = @lock.synchronize do
        tried.each { |id| @ids.delete(id) unless undone.include?(id) }
        if !@ids.empty? && Clock.monotonic - @since > GIVE_UP
          given_up = @ids.size
          @ids.clear
        end
        if @ids.empty?
          @since = nil
          @thread = nil
        end
        !@ids.empty?
      end
      if given_up
        @on_error.call(TierError.new("#{given_up} tag invalidations did not reach the versions' authority in #{GIVE_UP} s " \
          "and are given up"), :poller)
      end
      left
    end
  end
end
