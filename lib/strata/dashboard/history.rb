# frozen_string_literal: true

module Strata
  class Dashboard
    # The page's time series, kept by the dashboard's process: a ring of CAPACITY points, one per
    # snapshot (Stats#snapshot) recorded, each what changed since the one before (Points). The
    # dashboard keeps it where it has no L1 table; with one, every process of the host shares
    # SharedHistory instead. Thread-safe: one lock around the ring.
    class History
      CAPACITY = 600 # points: ten minutes at one a second

      # What a point is, for History and SharedHistory. Figures that are running totals become
      # rates over the interval: each tier's and the store's hit ratio, each operation's mean
      # latency, the store's fills, waits, stale hits and invalidations, and each tier's
      # evictions (and the SQL tier's expired rows). A total that went down (a restarted server,
      # a rebuilt table) gives no point for that interval.
      #
      # Where the figures come from, when the snapshot has them (the host's counters): l1's and
      # sql's "counters" and the top-level "memcached_counters" (hits, misses, evictions, ...),
      # "store" (its figures, and operations: {name => {count:, timed:, us:}}; a tier's counters
      # may carry operations too). Without counters, memcached's hit ratio is its servers' own
      # get_hits and get_misses (over every client of them). memcached's evictions are always
      # its servers' own (the client can't see them), summed over the servers up at both ends
      # of the interval.
      module Points
        STORE_FIGURES = %i[fills lock_waits lease_waits stale_hits invalidations].freeze
        FIELDS = %i[hit_ratio latency store evictions expired].freeze

        module_function

        # The running totals in snapshot: {hits: {line => [hits, misses]}, ops: {name => [timed,
        # us]}, store: {figure => count}, evictions: {tier => count}, l2_evictions: {server =>
        # count}, expired: {tier => count}}.
        def totals(snapshot)
          hits = {}
          ops = {}
          evictions = {}
          expired = {}
          tier_counters(snapshot).each do |tier, counters|
            hits[tier] = [counters[:hits], counters[:misses]] if counters[:hits].is_a?(Integer) && counters[:misses].is_a?(Integer)
            add_operations(ops, "#{tier}.", counters[:operations])
            evictions[tier] = counters[:evictions] if tier != :l2 && counters[:evictions].is_a?(Integer)
            expired[tier] = counters[:expired] if counters[:expired].is_a?(Integer)
          end
          hits[:l2] ||= memcached_server_hits(snapshot[:memcached])
          store = snapshot[:store].is_a?(Hash) ? snapshot[:store] : {}
          add_operations(ops, "", store[:operations])
          hits[:store] = store_reads(store[:operations])
          {hits: hits.compact, ops: ops, store: store.slice(*STORE_FIGURES).select { |_, value| value.is_a?(Integer) },
           evictions: evictions, l2_evictions: memcached_server_evictions(snapshot[:memcached]), expired: expired}
        end

        # The point at time (epoch seconds) between totals before and now.
        def point(time, before, now)
          evictions = now[:evictions].to_h { |tier, value| [tier, delta(before[:evictions][tier], value)] }
          evictions[:l2] = servers_delta(before[:l2_evictions], now[:l2_evictions]) unless now[:l2_evictions].empty?
          {t: time,
           hit_ratio: now[:hits].to_h { |tier, (hits, misses)| [tier, ratio(before[:hits][tier], hits, misses)] },
           latency: now[:ops].to_h { |op, (count, us)| [op, mean(before[:ops][op], count, us)] },
           store: now[:store].to_h { |name, value| [name, delta(before[:store][name], value)] },
           evictions: evictions.sort.to_h,
           expired: now[:expired].to_h { |tier, value| [tier, delta(before[:expired][tier], value)] }}
        end

        # {t: [seconds, ...], hit_ratio: {tier => [ratio or nil, ...]}, latency: {"tier.op" =>
        # [microseconds or nil, ...]}, store: {figure => [count or nil, ...]}, evictions: {tier =>
        # [count or nil, ...]}, expired: {tier => [count or nil, ...]}} of points, oldest first.
        def series(points)
          {t: points.map { |p| p[:t] }}.merge(FIELDS.to_h { |field| [field, columns(points, field)] })
        end

        # totals as JSON gave them back (String keys) in totals' shape, or nil when they are not.
        def restore_totals(json)
          return nil unless json.is_a?(Hash)

          hits = json["hits"]
          ops = json["ops"]
          return nil unless pairs?(hits) && pairs?(ops) && %w[store evictions l2_evictions expired].all? { |name| counts?(json[name]) }

          {hits: hits.transform_keys(&:to_sym), ops: ops, store: json["store"].transform_keys(&:to_sym),
           evictions: json["evictions"].transform_keys(&:to_sym), l2_evictions: json["l2_evictions"],
           expired: json["expired"].transform_keys(&:to_sym)}
        end

        # A point as JSON gave it back in point's shape, or nil when it is not one.
        def restore_point(json)
          return nil unless json.is_a?(Hash) && json["t"].is_a?(Numeric)

          fields = FIELDS.to_h { |field| [field, json[field.to_s]] }
          return nil unless fields.each_value.all? { |values| values.is_a?(Hash) && values.each_value.all? { |v| v.nil? || v.is_a?(Numeric) } }

          {t: json["t"]}.merge(fields.to_h { |field, values| [field, (field == :latency) ? values : values.transform_keys(&:to_sym)] })
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

        def up_servers(servers)
          servers.is_a?(Array) ? servers.select { |server| server.is_a?(Hash) && server[:state] == "up" } : []
        end

        def memcached_server_hits(servers)
          up = up_servers(servers).select { |server| server[:get_hits] }
          [up.sum { |server| server[:get_hits] }, up.sum { |server| server[:get_misses].to_i }] if up.any?
        end

        # {server => its evictions} of the servers up.
        def memcached_server_evictions(servers)
          up_servers(servers).select { |server| server[:evictions].is_a?(Integer) }.to_h { |server| [server[:server].to_s, server[:evictions]] }
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

        # The growth summed over the servers counted at both ends; nil when none was, or one's
        # count went down (a restart).
        def servers_delta(before, now)
          growth = (now.keys & before.keys).map { |server| now[server] - before[server] }
          (growth.empty? || growth.any?(&:negative?)) ? nil : growth.sum
        end

        # {name => [value or nil per point]} over every name any point has.
        def columns(points, field)
          names = points.flat_map { |p| p[field].keys }.uniq
          names.to_h { |name| [name, points.map { |p| p[field][name] }] }
        end

        def pairs?(hash)
          hash.is_a?(Hash) && hash.each_value.all? { |pair| pair.is_a?(Array) && pair.size == 2 && pair.all?(Integer) }
        end

        def counts?(hash)
          hash.is_a?(Hash) && hash.each_value.all?(Integer)
        end
      end

      def initialize(capacity: CAPACITY)
        @capacity = capacity
        @points = []
        @last = nil
        @lock = Mutex.new
      end

      # Adds the point for snapshot, taken at time (epoch seconds).
      def record(snapshot, time)
        totals = Points.totals(snapshot)
        @lock.synchronize do
          @points << Points.point(time, @last, totals) if @last
          @points.shift while @points.size > @capacity
          @last = totals
        end
      end

      # Points.series of the ring, oldest first.
      def series
        Points.series(@lock.synchronize { @points.dup })
      end
    end
  end
end
