# frozen_string_literal: true

require "strata/clock"
require "strata/errors"

module Strata
  # What Engine#report_failure tells (the store: to ActiveSupport.error_reporter and the log),
  # and how often. Every failure is counted (#stats); the first of its kind is told, and the
  # rest of that run are only counted, so that a dead server costs a few reports rather than
  # one per call (one thread met 44,635 "no memcached server is up" in 2.2 s).
  #
  # A kind is (tier, error class, server), the server when the error names one
  # (error.server). Its outage begins with a failure told, and lasts interval seconds: the
  # failures of that kind meanwhile are held back. The first one after that is told again,
  # with the count held back since, so an outage that goes on is told once an interval, and
  # one that ended and came back is told when it comes back (unless within the interval of
  # the last report). A success does not end an outage: the stack hears only of failures,
  # and watching successes would cost every hit.
  #
  # A value too large for a tier is no outage but a size that tier can never take: it is told
  # once per tier for the store's life, and counted per tier (too_large; :every_tier for a
  # value that no tier could hold, which the write then stored nowhere).
  #
  # Thread safety: one Mutex around the counts, taken on failures only.
  class FailureReports
    # Seconds an outage's report stands for the failures of its kind that follow.
    INTERVAL = 60

    # clock: seconds on a monotonic clock (for tests).
    def initialize(interval: INTERVAL, clock: Clock.method(:monotonic))
      @interval = interval
      @clock = clock
      @lock = Mutex.new
      @failures = Hash.new(0) # error class name => failures, told or not
      @too_large = Hash.new(0) # tier => values too large for it
      @held = 0 # failures not told, in all
      @kinds = {} # [tier, error class, server] => [time told, failures held back since]
    end

    # Counts error from tier (the server: error.server when it has one). nil when it is to be
    # held back; else the number of failures of its kind held back since it was last told.
    def record(error, tier)
      server = error.server if error.respond_to?(:server)
      too_large = error.is_a?(ValueTooLargeError)
      now = @clock.call
      @lock.synchronize do
        @failures[error.class.name] += 1
        @too_large[tier || :every_tier] += 1 if too_large
        kind = [tier, error.class, server]
        told = @kinds[kind]
        if told && (too_large || now - told[0] < @interval)
          told[1] += 1
          @held += 1
          next nil
        end

        @kinds[kind] = [now, 0]
        told ? told[1] : 0
      end
    end

    # failures: error class name => count; unreported: the failures held back; too_large:
    # tier => values too large for it.
    def stats
      @lock.synchronize { {failures: @failures.dup, unreported: @held, too_large: @too_large.dup} }
    end
  end
end
