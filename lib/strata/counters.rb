# frozen_string_literal: true

require "strata/clock"
require "strata/errors"
require "strata/strata_ext"

module Strata
  # The host's counters (ext/strata/counters.h): per tier, per store and per operation figures
  # that every process of the host adds to, and that anyone can read (SharedMemory#counters,
  # `strata stats`). With an L1 table they live in its file, in a slot per process; without
  # one they are this process's only, in a Counters::Local (C) of their own (#shared? says
  # which).
  #
  # Figures are named as in counters.h ("l1.hits", "store.fills", "op.read_hit.us"); #add takes
  # the index (INDEX) of one. The L1 table counts its own reads, writes, deletes and evictions in
  # C; the stack counts the other tiers' through a Row each, and the store its own figures.
  #
  # Thread safety: adds are made in C with the GVL held, so no increment is lost; a read is a
  # sum over slots that may be an add or two behind.
  class Counters
    INDEX = Tiers::SharedMemory::COUNTER_INDEX
    TIERS = %w[l1 memcached sql].freeze
    TIER_FIGURES = %w[hits misses writes writes_refused deletes evictions errors_timeout errors_connection errors_other].freeze
    # memcached's row only, after TIER_FIGURES: its gutter traffic and outage recoveries.
    MEMCACHED_FIGURES = %w[gutter_reads gutter_writes gutter_deletes recovery_deletes recovery_flushes].freeze
    # sql's row only, after TIER_FIGURES: its expiry passes and the rows they deleted for their TTL
    # or max_age (those deleted to keep within budget are its evictions).
    SQL_FIGURES = %w[expiry_passes expired].freeze
    # Each tier's figures, in its row's order.
    ROW_FIGURES = {"l1" => TIER_FIGURES, "memcached" => TIER_FIGURES + MEMCACHED_FIGURES, "sql" => TIER_FIGURES + SQL_FIGURES}.freeze
    STORE_FIGURES = %w[fills fill_us lock_waits lock_wait_us lease_waits lease_wait_us stale_hits invalidations versions_bumped].freeze
    OPERATIONS = %w[read_hit fetch_miss write delete].freeze

    FILLS = INDEX.fetch("store.fills")
    FILL_US = INDEX.fetch("store.fill_us")
    LOCK_WAITS = INDEX.fetch("store.lock_waits")
    LOCK_WAIT_US = INDEX.fetch("store.lock_wait_us")
    LEASE_WAITS = INDEX.fetch("store.lease_waits")
    LEASE_WAIT_US = INDEX.fetch("store.lease_wait_us")
    STALE_HITS = INDEX.fetch("store.stale_hits")
    INVALIDATIONS = INDEX.fetch("store.invalidations")
    VERSIONS_BUMPED = INDEX.fetch("store.versions_bumped")
    # The first word of each operation's row: count, then timed, then us.
    READ_HIT = INDEX.fetch("op.read_hit.count")
    FETCH_MISS = INDEX.fetch("op.fetch_miss.count")
    WRITE = INDEX.fetch("op.write.count")
    DELETE = INDEX.fetch("op.delete.count")

    # table: the Tiers::SharedMemory whose file holds the host's counters, or nil: this
    # process's own (a Local).
    def initialize(table = nil)
      @shared = !table.nil?
      @sink = table || Local.new
    end

    # Whether the figures are the host's (an L1 table), not this process's only.
    def shared?
      @shared
    end

    # What adds to the figures in one C call (_count, _operation_since, count_read_hit: see
    # ext/strata/counters_ext.h): the table, or a Local. For the paths where each Ruby call
    # counts (the store's hits, the tiers' Rows).
    attr_reader :sink

    # Adds n to the figure at index.
    def add(index, n = 1)
      @sink._count(index, n)
    end

    # One call of an operation (READ_HIT, ...) that began at started (Clock.monotonic_us): its
    # count, and its time.
    def operation(row, started)
      @sink._operation_since(row, started)
    end

    # n calls of an operation made together (a multi-key call) that began at started: counted
    # and timed as n calls that took the time between them.
    def operations(row, n, started)
      return if n.zero?

      add(row, n)
      add(row + 1, n)
      add(row + 2, Clock.monotonic_us - started)
    end

    # A fill (a fetch block) that began at started (Clock.monotonic_us) is over.
    def fill(started)
      add(FILLS)
      add(FILL_US, Clock.monotonic_us - started)
    end

    # Seconds between started (Clock.monotonic_us) and now, added as one wait to the waits and
    # wait_us figures at index (LOCK_WAITS or LEASE_WAITS; its _us word follows). The seconds.
    def waited(index, started)
      us = Clock.monotonic_us - started
      add(index)
      add(index + 1, us)
      us / 1_000_000.0
    end

    # The figures as #shape gives them.
    def totals
      Counters.shape(flat_totals)
    end

    # {"l1.hits" => n, ...} with "processes", "slots_used" and "unslotted".
    def flat_totals
      @sink._counter_totals
    end

    # {tiers: {l1: {hits:, misses:, ..., hit_ratio:}, memcached: {..., gutter_reads:, ...}, sql: {..., expiry_passes:, expired:}},
    #  store: {fills:, fill_us:, ..., operations: {read_hit: {count:, timed:, us:, mean_us:}, ...},
    #  processes:, slots_used:, unslotted:}} from a flat {"l1.hits" => n, ...}.
    def self.shape(flat)
      tiers = TIERS.to_h do |tier|
        figures = ROW_FIGURES.fetch(tier).to_h { |name| [name.to_sym, flat.fetch("#{tier}.#{name}")] }
        [tier.to_sym, figures.merge(hit_ratio: ratio(figures[:hits], figures[:hits] + figures[:misses]))]
      end
      store = STORE_FIGURES.to_h { |name| [name.to_sym, flat.fetch("store.#{name}")] }
      store[:operations] = OPERATIONS.to_h do |op|
        count, timed, us = %w[count timed us].map { |part| flat.fetch("op.#{op}.#{part}") }
        [op.to_sym, {count: count, timed: timed, us: us, mean_us: timed.zero? ? nil : us.fdiv(timed).round(1)}]
      end
      store.merge!(processes: flat["processes"], slots_used: flat["slots_used"], unslotted: flat["unslotted"])
      {tiers: tiers, store: store}
    end

    # part / whole rounded, or nil when whole is 0.
    def self.ratio(part, whole)
      whole.zero? ? nil : part.fdiv(whole).round(4)
    end

    # 0 for a timeout, 1 for a connection that failed (refused, reset, closed, a server down, no
    # free connection), 2 for anything else; from the error and its causes, by class and message.
    def self.error_kind(error)
      seen = error
      # Bound: the error and at most 3 causes.
      4.times do
        break unless seen
        return 0 if seen.class.name.to_s.include?("Timeout") || seen.message.match?(/timed? ?out/i)
        return 1 if connection_error?(seen)

        seen = seen.cause
      end
      2
    end

    CONNECTION_MESSAGE = /\bis down\b|marked down|no \w+ server is up|no free connection|refused|reset by peer|broken pipe|closed|connect/i

    def self.connection_error?(error)
      error.is_a?(SystemCallError) || error.is_a?(IOError) || error.class.name.to_s.match?(/Socket|Connection/) ||
        error.message.match?(CONNECTION_MESSAGE)
    end
    private_class_method :connection_error?
  end
end

require "strata/counters/row"
