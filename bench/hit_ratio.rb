# frozen_string_literal: true

require_relative "lru_model"
require_relative "stores"
require_relative "values"
require_relative "zipf"

module Strata
  module Bench
    # Replays one seeded Zipf trace against a small strata_l1 table and against an exact LRU with
    # the same byte budget, both starting empty: get, and on a miss set. The ratio of the two hit
    # ratios says what the table's segment eviction costs next to the ideal it approximates.
    class HitRatio
      DEFAULTS = {
        keys: 50_000,
        requests: 200_000,
        skew: 0.9,
        # Value sizes are drawn per key, uniformly in this range, and fixed for the run.
        value_sizes: 100..2000,
        # Small, so the working set does not fit and eviction decides the hit ratio.
        table_bytes: 4 * 1024 * 1024,
        seed: 42
      }.freeze

      def initialize(env, **options)
        @env = env
        @options = DEFAULTS.merge(options.slice(*DEFAULTS.keys))
      end

      # A Hash for the JSON report; #lines renders it.
      def run
        o = @options
        random = Random.new(o[:seed])
        sizes = Array.new(o[:keys]) { random.rand(o[:value_sizes]) }
        keys = Array.new(o[:keys]) { |rank| "zipf:#{rank}" }
        trace = Zipf.new(n: o[:keys], skew: o[:skew], seed: o[:seed]).trace(o[:requests])
        store = Stores::StrataL1.new(@env, size: o[:table_bytes])
        budget = store.table.stats[:data_bytes]
        strata_hits = replay_strata(store.table, trace, keys, sizes)
        stats = store.table.stats
        lru_hits = replay_lru(LruModel.new(budget), trace, keys, sizes)
        report(budget, strata_hits, lru_hits, stats)
      ensure
        store&.close
      end

      def self.lines(report)
        budget = "#{report[:budget_bytes]} B (#{report[:budget_source]})"
        [
          "hit ratio: Zipf(#{report[:skew]}) trace, #{report[:requests]} requests over #{report[:keys]} keys, " \
          "values #{report[:value_sizes]} B, cold start, get then set on miss",
          "  strata_l1 (#{report[:table_bytes] >> 20} MiB table): #{format("%.2f", report[:strata_l1_hit_pct])}% hits" \
          "  (evictions #{report[:strata_l1_evictions].inspect}, entries at end #{report[:strata_l1_entries].inspect})",
          "  exact LRU, budget #{budget}, key+value bytes: #{format("%.2f", report[:lru_hit_pct])}% hits",
          "  strata_l1 / LRU: #{report[:ratio] ? format("%.3f", report[:ratio]) : "-"}"
        ]
      end

      private

      def replay_strata(table, trace, keys, sizes)
        bytes = Values.bytes(@options[:value_sizes].max)
        trace.count do |rank|
          key = keys[rank]
          next true if table.get(key)

          table.set(key, bytes.byteslice(0, sizes[rank]))
          false
        end
      end

      def replay_lru(lru, trace, keys, sizes)
        trace.count do |rank|
          key = keys[rank]
          next true if lru.get(key)

          lru.set(key, key.bytesize + sizes[rank])
          false
        end
      end

      # budget: the table's data capacity (stats[:data_bytes]), which the LRU gets in full.
      def report(budget, strata_hits, lru_hits, stats)
        o = @options
        requests = o[:requests].to_f
        strata_pct = 100 * strata_hits / requests
        lru_pct = 100 * lru_hits / requests
        {
          keys: o[:keys], requests: o[:requests], skew: o[:skew], seed: o[:seed],
          value_sizes: "#{o[:value_sizes].min}..#{o[:value_sizes].max}", table_bytes: o[:table_bytes],
          budget_bytes: budget, budget_source: "stats[:data_bytes] of the table",
          strata_l1_hit_pct: strata_pct, lru_hit_pct: lru_pct, ratio: lru_pct.zero? ? nil : strata_pct / lru_pct,
          strata_l1_evictions: stats[:evictions], strata_l1_entries: stats[:entries]
        }
      end
    end
  end
end
