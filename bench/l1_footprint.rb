# frozen_string_literal: true

require_relative "stores"
require_relative "values"

module Strata
  module Bench
    # What L1 spends beside the bytes it is asked to keep. Fills a fresh table with the hit_30b
    # workload's keys and 30 B values well past full, so it sits in its steady state (evicting a
    # segment at a time), then reads every key back and counts the live entries:
    #   file:  (file size - key and value bytes of live entries) / live entries. This charges the
    #          index, item headers, and free space in partly compacted segments to the entries.
    #   stats: (index bytes + item header bytes) / entries. Stats report no such totals, so they
    #          are derived from stats[:slots] and the layout in ext/strata/table.h (LAYOUT below).
    class L1Footprint
      DEFAULTS = {
        table_bytes: 4 * 1024 * 1024,
        # Inserts per slot in the index: twice as many keys as the table could ever index.
        overfill: 2
      }.freeze

      # From ext/strata/table.h: the index is 64-byte buckets of 7 slots; each item has a 24-byte
      # header.
      LAYOUT = {bucket_bytes: 64, slots_per_bucket: 7, item_header_bytes: 24}.freeze

      def initialize(env, **options)
        @env = env
        @options = DEFAULTS.merge(options.slice(*DEFAULTS.keys))
      end

      def run
        store = Stores::StrataL1.new(@env, size: @options[:table_bytes])
        keys = fill(store.table)
        live, payload = live_payload(store.table, keys)
        report(store, keys.size, live, payload)
      ensure
        store&.close
      end

      def self.lines(report)
        file = report[:file_overhead_per_entry]
        meta = report[:metadata_per_entry]
        [
          "L1 metadata per entry: #{report[:table_bytes] >> 20} MiB table, #{report[:inserted]} inserts of 30 B " \
          "values, #{report[:live_entries]} live after, #{report[:payload_bytes]} B of their keys+values",
          "  (file size - key+value bytes) / live entries: #{file ? format("%.1f B", file) : "-"}",
          "  (index + item header bytes) / entries: #{meta ? format("%.1f B", meta) : "-"} (#{report[:metadata_source]})"
        ]
      end

      private

      # Bounded: overfill x slots inserts.
      def fill(table)
        value = Values.bytes(30)
        Array.new(@options[:overfill] * table.stats[:slots]) do |i|
          key = "sb:#{@env.nonce}:hit_30b:k#{i}"
          table.set(key, value)
          key
        end
      end

      def live_payload(table, keys)
        live = 0
        payload = 0
        keys.each_slice(1000) do |slice|
          table.get_multi(slice).each do |key, value|
            live += 1
            payload += key.bytesize + value.bytesize
          end
        end
        [live, payload]
      end

      def report(store, inserted, live, payload)
        stats = store.table.stats
        file_size = File.size(store.path)
        meta, source = metadata_per_entry(stats)
        {
          table_bytes: @options[:table_bytes], file_bytes: file_size, inserted: inserted, live_entries: live,
          stats_entries: stats[:entries], evictions: stats[:evictions], payload_bytes: payload,
          file_overhead_per_entry: live.positive? ? (file_size - payload).to_f / live : nil,
          metadata_per_entry: meta, metadata_source: source
        }
      end

      def metadata_per_entry(stats)
        entries = stats[:entries].to_i
        return [nil, "no live entries"] unless entries.positive?

        index = stats[:slots] * LAYOUT[:bucket_bytes] / LAYOUT[:slots_per_bucket]
        [(index + LAYOUT[:item_header_bytes] * entries).to_f / entries,
          "stats have no index_bytes/item_header_bytes; derived: stats[:slots] x 64/7 B index " \
          "+ 24 B header per entry (table.h layout), over stats[:entries]"]
      end
    end
  end
end
