# frozen_string_literal: true

module Strata
  class Dashboard
    # The page's time series, kept by the dashboard's process: a ring of CAPACITY points, one per
    # snapshot (Stats#snapshot) recorded, each what changed since the one before. Figures that
    # are running totals become rates over the interval: a tier's hit ratio, each operation's
    # mean latency, the store's fills, waits, stale hits and invalidations. A total that went
    # down (a restarted server or a rebuilt table) gives no point for that interval.
    #
    # Where the figures come from: each tier's "counters" (hits, misses, operations: {name =>
    # {count:, total_us:}}) and the snapshot's "store" section, when the build has them; without
    # counters, memcached's hit ratio is its servers' own get_hits and get_misses (over every
    # client of them). Thread-safe: one lock around the ring.
    class History
      CAPACITY = 600 # points: ten minutes at one a second
      STORE_FIGURES = %i[fills waits stale invalidations].freeze

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

      # The running totals in snapshot: {hits: {tier => [hits, misses]}, ops: {"tier.op" =>
      # [count, total_us]}, store: {figure => count}}.
      def totals(snapshot)
        hits = {}
        ops = {}
        tier_counters(snapshot).each do |tier, counters|
          hits[tier] = [counters[:hits], counters[:misses]] if counters[:hits] && counters[:misses]
          (counters[:operations] || {}).each do |op, figures|
            ops["#{tier}.#{op}"] = [figures[:count], figures[:total_us]] if figures.is_a?(Hash)
          end
        end
        hits[:l2] ||= memcached_server_hits(snapshot[:memcached])
        hits.compact!
        store = (snapshot[:store] || {}).slice(*STORE_FIGURES).select { |_, value| value.is_a?(Integer) }
        {hits: hits, ops: ops, store: store}
      end

      # tier => its counters, for the tiers whose section has them (memcached's summed over
      # servers).
      def tier_counters(snapshot)
        found = {}
        found[:l1] = snapshot[:l1][:counters] if counters?(snapshot[:l1])
        servers = Array(snapshot[:memcached]).select { |server| counters?(server) }.map { |server| server[:counters] }
        found[:l2] = servers.reduce { |sum, counters| add(sum, counters) } if servers.any?
        found[:l3] = snapshot[:sql][:counters] if counters?(snapshot[:sql])
        found
      end

      def counters?(section)
        section.is_a?(Hash) && section[:counters].is_a?(Hash)
      end

      def add(a, b)
        if a.is_a?(Hash) && b.is_a?(Hash) then a.merge(b) { |_, x, y| add(x, y) }
        elsif a.is_a?(Numeric) && b.is_a?(Numeric) then a + b
        else a
        end
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
