# frozen_string_literal: true

module Strata
  module Tiers
    class SQL
      # The table's entries and bytes for an expiry pass (SQL#expire), which Expiry weighs against
      # max_entries and max_size: upper bounds when they are enough, else an exact count, else,
      # on a large table, an estimate whose reading is bounded (see the class comment of SQL,
      # "Sizing", and Statements::EXACT_ROWS). Runs its statements on the connection it is given,
      # inside the pass's transaction.
      class Sizing
        # database: the tier's Database; statements: its Statements; expiry: its Expiry (which
        # bounds are set).
        def initialize(database, statements, expiry)
          @database = database
          @statements = statements
          @expiry = expiry
        end

        # [entries, bytes] of the table on c, or upper bounds of both when those are enough. The
        # id span bounds the rows (ids are unique), and on SQLite the database file bounds the
        # bytes. While both are within budget no row is over it, as with the true totals, so the
        # pass counts nothing: a table far from its bounds, the common case, costs two index
        # lookups and a header read instead of thousands of rows. Otherwise see #table_totals.
        def totals(c)
          low, high = @database.select(c, :expire, @statements.id_range).first
          return [0, 0] if low.nil?

          bounds = [high - low + 1, bytes_bound(c)]
          return bounds if @expiry.within_budget?(*bounds)

          table_totals(c, low, high)
        end

        # [binds for Statements#sample_totals, scale] over the ids low...boundary. In each stretch,
        # a window that starts anywhere in it and wraps around its end (two ranges then, else one
        # and an empty one), clipped below boundary. When the windows would cover every id, one
        # range counts them all. Pure but for rand.
        def sample_ranges(low, boundary)
          window = Statements::SAMPLE_WINDOW
          windows = Statements::SAMPLE_WINDOWS
          return [[low, boundary, *([0, 0] * (windows * 2 - 1))], 1] if boundary - low <= window * windows

          stretch = (boundary - low).fdiv(windows).ceil
          binds = Array.new(windows) do |index|
            first = low + index * stretch
            from = first + rand(stretch)
            over = from + window - (first + stretch)
            ranges = (over > 0) ? [from, first + stretch, first, first + over] : [from, from + window, 0, 0]
            ranges.map { |id| [id, boundary].min }
          end
          [binds.flatten, stretch.fdiv(window)]
        end

        private

        # An upper bound on the table's bytes: 0 without a max_size (they don't matter, and the
        # pass subtracts from it), the database's size where the dialect has one, else nil.
        def bytes_bound(c)
          return 0 unless @expiry.max_size?
          return nil unless @statements.database_bytes

          @database.select(c, :expire, @statements.database_bytes).first.first
        end

        # [entries, bytes] of the table whose ids run from low to high: exact while they span at
        # most Statements::EXACT_SPAN or the table holds at most EXACT_ROWS rows; otherwise an
        # estimate. Rewrites move hot keys to the newest ids, so the span fills unevenly: dense at
        # the top, sparser further down. So the estimate counts the newest rows exactly, and below
        # them one window in each of SAMPLE_WINDOWS equal stretches, each scaled up to its stretch:
        # no one dense stretch stands for the whole table, and every id is as likely to be counted.
        def table_totals(c, low, high)
          return @database.select(c, :expire, @statements.totals).first.map(&:to_i) if high - low < Statements::EXACT_SPAN

          entries, bytes, boundary = @database.select(c, :expire, @statements.newest_totals).first.map(&:to_i)
          return [entries, bytes] if entries <= Statements::EXACT_ROWS

          binds, scale = sample_ranges(low, boundary)
          sampled_entries, sampled_bytes = @database.select(c, :expire, @statements.sample_totals, binds).first
          [entries + (sampled_entries.to_i * scale).round, bytes + (sampled_bytes.to_i * scale).round]
        end
      end
    end
  end
end
