# frozen_string_literal: true

module Strata
  class Counters
    # The figures of one tier row (memcached or sql) of the host's counters, through which the
    # tier counts its reads, writes and deletes and the stack its failures (Tier#counter_row,
    # Tier#count_in). Counts cache keys only (the stack's own keys start with a NUL byte) and
    # passes each answer through, so a tier writes `@counts.read(key, @client.get(key))`.
    class Row
      def initialize(counters, tier)
        @sink = counters.sink # one C call per count
        @hits, @misses, @writes, @refused, @deletes = %w[hits misses writes writes_refused deletes].map { |name| INDEX.fetch("#{tier}.#{name}") }
        # By Counters.error_kind: timeout, connection, other.
        @errors = %w[errors_timeout errors_connection errors_other].map { |name| INDEX.fetch("#{tier}.#{name}") }.freeze
        # memcached's only (nil in the other rows): gutter reads, writes and deletes, recovery
        # deletes and flushes (MEMCACHED_FIGURES).
        @outage = MEMCACHED_FIGURES.map { |name| INDEX["#{tier}.#{name}"] }.freeze
        # sql's only (nil in the other rows): expiry passes, rows they expired, rows they evicted.
        @expiry = [INDEX["#{tier}.expiry_passes"], INDEX["#{tier}.expired"], INDEX.fetch("#{tier}.evictions")].freeze
      end

      # n requests for keys whose server was down went to a gutter: reads, writes, deletes (and
      # the deletes of gutter copies at the server's recovery). Meta::Client counts them;
      # memcached's row only.
      def gutter_read(n) = @sink._count(@outage[0], n)

      def gutter_wrote(n) = @sink._count(@outage[1], n)

      def gutter_deleted(n) = @sink._count(@outage[2], n)

      # n keys of a recovery log deleted on the recovered server; a server flushed at its
      # recovery (memcached's row only).
      def recovery_deleted(n) = @sink._count(@outage[3], n)

      def recovery_flushed = @sink._count(@outage[4], 1)

      # An expiry pass of the SQL tier ran and deleted expired rows whose TTL had passed or that
      # outlived max_age, and evicted rows to keep the table within budget (sql's row only).
      def expiry_pass(expired, evicted)
        @sink._count(@expiry[0], 1)
        @sink._count(@expiry[1], expired) unless expired.zero?
        @sink._count(@expiry[2], evicted) unless evicted.zero?
      end

      # bytes, counted as a hit (non-nil) or a miss of key.
      def read(key, bytes)
        @sink._count(bytes.nil? ? @misses : @hits, 1) unless key.getbyte(0) == 0
        bytes
      end

      # found: a Hash of the keys wanted that were found; a hit each, and a miss each for the
      # rest.
      def read_many(keys, found)
        wanted = keys.count { |key| key.getbyte(0) != 0 }
        hits = found.count { |key, _| key.getbyte(0) != 0 }
        @sink._count(@hits, hits) unless hits.zero?
        @sink._count(@misses, wanted - hits) if wanted > hits
        found
      end

      # stored (true or false), counted as a write or a refused write of key.
      def wrote(key, stored)
        @sink._count(stored ? @writes : @refused, 1) unless key.getbyte(0) == 0
        stored
      end

      # results: key => stored, counted as #wrote each.
      def wrote_many(results)
        stored = results.count { |key, ok| ok && key.getbyte(0) != 0 }
        refused = results.count { |key, ok| !ok && key.getbyte(0) != 0 }
        @sink._count(@writes, stored) unless stored.zero?
        @sink._count(@refused, refused) unless refused.zero?
        results
      end

      # deleted (true when something was removed), counted as a delete of key when true.
      def deleted(key, deleted)
        @sink._count(@deletes, 1) if deleted && key.getbyte(0) != 0
        deleted
      end

      # results: key => deleted, counted as #deleted each.
      def deleted_many(results)
        removed = results.count { |key, ok| ok && key.getbyte(0) != 0 }
        @sink._count(@deletes, removed) unless removed.zero?
        results
      end

      # A failure the stack met on the tier: a value too large for it is a refused write, any
      # other an error of its kind (Counters.error_kind).
      def failed(error)
        return @sink._count(@refused, 1) if error.is_a?(ValueTooLargeError)

        @sink._count(@errors[Counters.error_kind(error)], 1)
      end

      # What a tier counts through until the stack gives it a Row: nothing, answers passed
      # through.
      class Uncounted
        def read(_key, bytes) = bytes

        def read_many(_keys, found) = found

        def wrote(_key, stored) = stored

        def wrote_many(results) = results

        def deleted(_key, deleted) = deleted

        def deleted_many(results) = results

        def failed(_error) = nil

        def gutter_read(_n) = nil

        def gutter_wrote(_n) = nil

        def gutter_deleted(_n) = nil

        def recovery_deleted(_n) = nil

        def recovery_flushed = nil

        def expiry_pass(_expired, _evicted) = nil
      end

      NONE = Uncounted.new.freeze
    end
  end
end
