# frozen_string_literal: true

module Strata
  class Dashboard
    # The page's time series, kept by the dashboard's process: a ring of CAPACITY points, one per
    # snapshot (Stats#snapshot) recorded, each what changed since the one before. Figures that
    # are running totals become rates over the interval: each tier's and the store's hit ratio,
    # each operation's mean latency, the store's fills, waits, stale hits and invalidations. A
    # total that went down (a restarted server, a rebuilt table) gives no point for that interval.
    #
    # Where the figures come from, when the snapshot has them (the host's counters): l1's and
    # sql's "counters" and the top-level "memcached_counters" (hits, misses, ...), "store" (its
    # figures, and operations: {name => {count:, timed:, us:}}; a tier's counters may carry
    # operations too). Without counters, memcached's hit ratio is its servers' own get_hits and
    # get_misses (over every client of them). Thread-safe: one lock around the ring.
    class History
      CAPACITY = 600 # points: ten minutes at one a second
      STORE_FIGURES = %i[fills lock_waits lease_waits stale_hits invalidations].freeze

      def initialize(capacity: CAPACITY)
        @capacity = capacity
        @points = []
        @last = nil
        @lock = Mutex.new
      end

      # Adds the point for snapshot, taken at time (epoch seconds).
      def record(snapshot, time)
        totals = totals(snapshot)
        @lock.synchronize do
          @points << point(time, @last, totals) if @last
          @points.shift while @points.size > @capacity
          @last = totals
        end
      end

      # {t: [seconds, ...], hit_ratio: {tier => [ratio or nil, ...]}, latency: {"tier.op" =>
      # [microseconds or nil, ...]}, store: {figure => [count or nil, ...]}}, oldest first.
      def series
        points = @lock.synchronize { @points.dup }
        {t: points.map { |p| p[:t] }, hit_ratio: columns(points, :hit_ratio),
         latency: columns(points, :latency), store: columns(points, :store)}
      end

      private

      # The running totals in snapshot: {hits: {line => [hits, misses]}, ops: {name => [timed,
      # us]}, store: {figure => count}}.
      def totals(snapshot)
        hits = {}
        ops = {}
        tier_counters(snapshot).each do |tier, counters|
          hits[tier] = [counters[:hits], counters[:misses]] if counters[:hits].is_a?(Integer) && counters[:misses].is_a?(Integer)
          add_operations(ops, "#{tier}.", counters[:operations])
        end
        hits[:l2] ||= memcached_server_hits(snapshot[:memcached])
        store = snapshot[:store].is_a?(Hash) ? snapshot[:store] : {}
        add_operations(ops, "", store[:operations])
        hits[:store] = store_reads(store[:operations])
        {hits: hits.compact, ops: ops, store: store.slice(*STORE_FIGURES).select { |_, value| value.is_a?(Integer) }}
      end

      # tier => its counters, for the tiers the snapshot has them for.
      def tier_counters(snapshot)
        {l1: snapshot.dig(:l1, :counters), l2: snapshot[:memcached_counters], l3: snapshot.dig(:sql, :counters)}
          .select { |_, counters| counters.is_a?(Hash) }
      rescue TypeError # a section that is not a Hash (an error) has no counters
        {}
      end

      # Each operation's [calls timed, their total microseconds] into ops, its name prefixed.
      def add_operations(ops, prefix, operations)
        return unless operations.is_a?(Hash)

        operations.each do |name, figures|
          next unless figures.is_a?(Hash)

          calls = figures[:timed] || figures[:count]
          us = figures[:us] || figures[:total_us]
          ops["#{prefix}#{name}"] = [calls, us] if calls.is_a?(Integer) && us.is_a?(Integer)
        end
      end

      # The store's reads: [read hits, fetch misses], when it counts them.
      def store_reads(operations)
        hits = operations.is_a?(Hash) && operations.dig(:read_hit, :count)
        misses = operations.is_a?(Hash) && operations.dig(:fetch_miss, :count)
        [hits, misses] if hits.is_a?(Integer) && misses.is_a?(Integer)
      end

      def memcached_server_hits(servers)
        up = Array(servers).select { |server| server[:state] == "up" && server[:get_hits] }
        [up.sum { |server| server[:get_hits] }, up.sum { |server| server[:get_misses].to_i }] if up.any?
      end

      def point(time, before, now)
        {t: time,
         hit_ratio: now[:hits].to_h { |tier, (hits, misses)| [tier, ratio(before[:hits][tier], hits, misses)] },
         latency: now[:ops].to_h { |op, (count, us)| [op, mean(before[:ops][op], count, us)] },
         store: now[:store].to_h { |name, value| [name, delta(before[:store][name], value)] }}
      end

      def ratio(before, hits, misses)
        return nil unless before

        h = hits - before[0]
        m = misses - before[1]
        (h.negative? || m.negative? || (h + m).zero?) ? nil : h.fdiv(h + m).round(4)
      end

      def mean(before, count, us)
        return nil unless before

        n = count - before[0]
        t = us - before[1]
        (n.positive? && !t.negative?) ? t.fdiv(n).round(1) : nil
      end

      def delta(before, value)
        (before && value >= before) ? value - before : nil
      end

      # {name => [value or nil per point]} over every name any point has.
      def columns(points, field)
        names = points.flat_map { |p| p[field].keys }.uniq
        names.to_h { |name| [name, points.map { |p| p[field][name] }] }
      end
    end
  end
end
