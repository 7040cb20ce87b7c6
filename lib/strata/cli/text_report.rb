# frozen_string_literal: true

module Strata
  module CLI
    # One snapshot (Stats#snapshot) as a compact table: a line per L1 table, memcached server
    # and SQL table, "tier  source  name=value ...".
    class TextReport
      def initialize(snapshot)
        @snapshot = snapshot
      end

      def to_s
        rows = [["tier", "source", "figures"]]
        rows << l1_row(@snapshot[:l1]) if @snapshot.key?(:l1)
        rows << segments_row(@snapshot[:l1][:segments]) if @snapshot.dig(:l1, :segments)
        rows << counters_row("l1", @snapshot[:l1][:counters]) if @snapshot.dig(:l1, :counters)
        @snapshot[:memcached]&.each { |server| rows << memcached_row(server) }
        if (memcached = @snapshot[:memcached_counters])
          rows << counters_row("l2", memcached)
          rows << gutter_row(memcached)
        end
        rows << sql_row(@snapshot[:sql]) if @snapshot.key?(:sql)
        if (sql = @snapshot.dig(:sql, :counters))
          rows << counters_row("l3", sql)
          rows << expiry_row(sql)
        end
        rows.concat(store_rows(@snapshot[:store])) if @snapshot[:store]
        widths = [0, 1].map { |i| rows.map { |row| row[i].size }.max }
        lines = rows.map { |row| "#{row[0].ljust(widths[0])}  #{row[1].ljust(widths[1])}  #{row[2]}".rstrip }
        "#{@snapshot[:time]}\n#{lines.join("\n")}\n"
      end

      private

      def l1_row(l1)
        return ["l1", l1[:path].to_s, "error: #{l1[:error]}"] if l1[:error]

        ["l1", l1[:path], "entries=#{l1[:entries]} slots=#{l1[:slots]} fill=#{(l1[:slot_fill] * 100).round(2)}% " +
          pairs(l1, :size, :shards, :segment_size, :segments_per_shard, :data_bytes, :max_value_size)]
      end

      # How long ago the segments in use began to be written: oldest, median, newest (seconds).
      def segments_row(segments)
        ages = %i[oldest median newest].map { |name| "#{name}=#{seconds(segments[name])}" }
        ["l1", "segment ages", "#{ages.join(" ")} #{pairs(segments, :in_use, :unknown)}"]
      end

      # up with the server's figures, or unreachable; then since when a process of the host
      # considers it down, if one does.
      def memcached_row(server)
        state = if server[:state] == "up"
          "up " + pairs(server, :curr_items, :bytes, :get_hits, :get_misses, :evictions)
        else
          "unreachable: #{server[:error]}"
        end
        marked = server[:down_since] && "; down since #{server[:down_since]} (marked by process #{server[:down_marked_by]} on this host)"
        ["l2", server[:server], "#{state}#{marked}"]
      end

      def sql_row(sql)
        return ["l3", sql[:source].to_s, "error: #{sql[:error]}"] if sql[:error]

        ["l3", sql[:source], pairs(sql, :rows, :bytes, :tombstones, :log_rows, :log_head, :versions_rows)]
      end

      # A tier's host counters: reads with their hit ratio, writes, deletes, errors by kind.
      def counters_row(tier, counters)
        [tier, "host counters", "hits=#{counters[:hits]} misses=#{counters[:misses]} ratio=#{percent(counters[:hit_ratio])} " +
          pairs(counters, :writes, :writes_refused, :deletes, :evictions, :errors_timeout, :errors_connection, :errors_other)]
      end

      # memcached's outages: requests sent to a gutter while their server was down, and the
      # recoveries that followed.
      def gutter_row(counters)
        ["l2", "gutter", pairs(counters, :gutter_reads, :gutter_writes, :gutter_deletes, :recovery_deletes, :recovery_flushes)]
      end

      # The SQL tier's expiry passes: how many ran, the rows they deleted for their TTL or
      # max_age, and those they deleted to keep within max_size or max_entries.
      def expiry_row(counters)
        ["l3", "expiry", "passes=#{counters[:expiry_passes]} expired=#{counters[:expired]} evicted=#{counters[:evictions]}"]
      end

      # The store's figures: its reads' hit ratio and operations (count and mean time), then
      # fills, waits, stale hits and invalidations.
      def store_rows(store)
        operations = store[:operations].map do |name, op|
          "#{name}=#{op[:count]}#{" (#{op[:mean_us]} us)" if op[:mean_us]}"
        end
        [["store", "#{store[:processes]} processes", "ratio=#{percent(store[:hit_ratio])} #{operations.join(" ")}"],
          ["store", "", pairs(store, :fills, :fill_us, :lock_waits, :lock_wait_us, :lease_waits, :lease_wait_us,
            :stale_hits, :invalidations, :versions_bumped)]]
      end

      def percent(ratio)
        ratio ? "#{(ratio * 100).round(2)}%" : "-"
      end

      def seconds(age)
        age ? "#{age}s" : "-"
      end

      def pairs(hash, *names)
        names.map { |name| "#{name}=#{hash[name]}" }.join(" ")
      end
    end
  end
end
