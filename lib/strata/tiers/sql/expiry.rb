# frozen_string_literal: true

module Strata
  module Tiers
    class SQL
      # Which rows one expiry pass deletes. Pure: the tier reads the front of the FIFO (the oldest
      # rows by id, at most one batch) and the table's totals, and deletes the ids this returns.
      #
      # Walking the front in order, a row goes when it has expired (at its TTL; a tombstone at
      # its negated expires_at, see Statements), when it is older than max_age, or while the
      # table is still over max_size or max_entries counting only the rows kept so far. So a pass
      # deletes at most one batch, and when over budget it deletes the oldest rows first and stops
      # as soon as the table fits.
      class Expiry
        # Counts of one pass's decisions.
        Victims = Struct.new(:ids, :expired, :evicted)

        def initialize(max_size:, max_entries:, max_age:)
          @max_size = max_size
          @max_entries = max_entries
          @max_age_ms = max_age && (max_age * 1000).ceil
        end

        # True when the pass needs the table's totals (a bound on size or entries is set).
        def budgeted?
          !@max_size.nil? || !@max_entries.nil?
        end

        # True when there is a bound on bytes (max_size).
        def max_size?
          !@max_size.nil?
        end

        # True when a table of at most entries rows and bytes bytes is within every bound; bytes
        # nil (unknown) is within only when there is no max_size.
        def within_budget?(entries, bytes)
          (@max_entries.nil? || entries <= @max_entries) && (@max_size.nil? || (!bytes.nil? && bytes <= @max_size))
        end

        # Rows last written before this (unix ms) have outlived max_age; nil without a max_age.
        def written_before(now)
          @max_age_ms && now - @max_age_ms
        end

        # head: [[id, byte_size, expires_at, created_at], ...] in id order.
        # entries, bytes: the table's totals (ignored unless budgeted?). now: unix ms.
        def victims(head, entries, bytes, now)
          aged_before = written_before(now)
          victims = Victims.new([], 0, 0)
          head.each do |id, byte_size, expires_at, created_at| # bound: head.size, one batch
            if (expires_at != 0 && expires_at.abs <= now) || (aged_before && created_at < aged_before)
              victims.expired += 1
            elsif over_budget?(entries, bytes)
              victims.evicted += 1
            else
              next
            end
            victims.ids << id
            entries -= 1
            bytes -= byte_size
          end
          victims
        end

        private

        def over_budget?(entries, bytes)
          (!@max_entries.nil? && entries > @max_entries) || (!@max_size.nil? && bytes > @max_size)
        end
      end
    end
  end
end
