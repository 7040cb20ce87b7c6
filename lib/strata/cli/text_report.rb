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
        @snapshot[:memcached]&.each { |server| rows << memcached_row(server) }
        rows << sql_row(@snapshot[:sql]) if @snapshot.key?(:sql)
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

      def memcached_row(server)
        return ["l2", server[:server], "unreachable: #{server[:error]}"] unless server[:state] == "up"

        ["l2", server[:server], "up " + pairs(server, :curr_items, :bytes, :get_hits, :get_misses, :evictions)]
      end

      def sql_row(sql)
        return ["l3", sql[:source].to_s, "error: #{sql[:error]}"] if sql[:error]

        ["l3", sql[:source], pairs(sql, :rows, :bytes, :tombstones, :log_rows, :log_head, :versions_rows)]
      end

      def pairs(hash, *names)
        names.map { |name| "#{name}=#{hash[name]}" }.join(" ")
      end
    end
  end
end
