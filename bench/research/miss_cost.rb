# frozen_string_literal: true

require "benchmark/ips"
require_relative "../cases"
require_relative "../format"
require_relative "idle_round_trip"
require_relative "../stores"
require_relative "../workload"

module Strata
  module Bench
    # Issue 4's budget for a miss through all three tiers: fetch of an absent key through
    # strata_store_full (L1, memcached, SQLite; the block's value then written to all three) may
    # cost at most TARGET times what mem_cache_store's miss costs plus one SQLite read miss.
    #
    # The two misses come from the matrix's miss_30b cells (time per op is 1 / ips). The SQLite read
    # miss is measured here, on its own: Strata::Tiers::SQL#get of a key never written, on a fresh
    # strata_sql file holding what the miss_30b cell starts with (its 1024 keys of 30 B).
    # Beside them, IdleRoundTrip: what a memcached get costs after the server idled a while.
    class MissCost
      CASE = "miss_30b"
      STORE = Stores::StrataStoreFull::NAME
      BASELINE = Stores::MemCacheStore::NAME
      SQL = Stores::StrataSQL
      TARGET = 1.2

      # results: the matrix's Result list; skipped: store name => reason. warmup, time: seconds for
      # the SQLite read-miss measurement (the matrix's own per cell).
      def initialize(env, results, skipped:, warmup:, time:, progress: $stderr)
        @env = env
        @cells = results.to_h { |r| [[r.case_name, r.store], r] }
        @ran_case = results.any? { |r| r.case_name == CASE }
        @skipped = skipped
        @warmup = warmup
        @time = time
        @progress = progress
      end

      # A Hash for the JSON report (string keys); ::lines renders it. {"skipped" => reason} when the
      # cells it needs did not run.
      def run
        reason = skip_reason
        return {"skipped" => reason} if reason

        @progress.puts "miss cost: one #{SQL::NAME} get of an absent key, on its own"
        sql_us, sql_error = sql_read_miss
        store_us = us(STORE)
        baseline_us = us(BASELINE)
        budget = baseline_us + sql_us
        {
          "case" => CASE, "store" => STORE, "baseline" => BASELINE, "unit" => "microseconds per op",
          "store_us_per_op" => store_us.round(3), "baseline_us_per_op" => baseline_us.round(3),
          "sql_read_miss_us_per_op" => sql_us.round(3), "sql_read_miss_error_pct" => sql_error.round(2),
          "budget_us_per_op" => budget.round(3), "ratio" => (store_us / budget).round(3),
          "target_max_ratio" => TARGET, "met" => store_us / budget <= TARGET,
          "get_us_after_idle_gap_us" => idle_round_trips
        }
      rescue => e
        {"skipped" => "measuring the SQLite read miss failed (#{Format.error(e)})"}
      end

      def self.lines(section)
        title = "miss cost (target: #{CASE} through #{STORE} <= #{TARGET}x #{BASELINE}'s + one SQLite read miss)"
        return ["#{title}: skipped, #{section["skipped"]}"] if section["skipped"]

        rows = [
          ["#{STORE} #{CASE}", section["store_us_per_op"]],
          ["#{BASELINE} #{CASE}", section["baseline_us_per_op"]],
          ["one SQLite read miss (#{SQL::NAME} get, ±#{Format.pct(section["sql_read_miss_error_pct"])})",
            section["sql_read_miss_us_per_op"]],
          ["budget: #{BASELINE} + SQLite read miss", section["budget_us_per_op"]]
        ]
        width = rows.map { |label, _| label.length }.max
        verdict = section["met"] ? "met" : "not met"
        [title, *rows.map { |label, us| "  #{label.ljust(width)}  #{Format.significant(us).rjust(7)} µs/op" },
          "  #{STORE} / budget: #{format("%.2f", section["ratio"])}x (target at most #{TARGET}x: #{verdict})",
          *idle_lines(section["get_us_after_idle_gap_us"])]
      end

      # The IdleRoundTrip lines: a String (why it did not run) or {gap => µs}.
      def self.idle_lines(idle)
        return ["  memcached get after an idle server: not measured (#{idle})"] if idle.is_a?(String)

        ["  memcached get after the server idled (IdleRoundTrip): " +
          idle.map { |gap, us| "#{gap} µs idle #{Format.significant(us)} µs" }.join(", ")]
      end

      private

      def skip_reason
        return "#{CASE} was not among the cases run" unless @ran_case

        [STORE, BASELINE].each do |name|
          cell = @cells[[CASE, name]]
          return "#{name} did not run (#{@skipped[name] || "not among the stores run"})" unless cell
          return "#{CASE}/#{name} failed (#{cell.error})" unless cell.ok?
        end
        reason = SQL.unavailable_reason(@env)
        "#{SQL::NAME} cannot run here (#{reason})" if reason
      end

      # {gap => µs}, or why it could not be measured.
      def idle_round_trips
        @progress.puts "miss cost: memcached gets after an idle gap"
        IdleRoundTrip.new(@env).run.transform_keys(&:to_s).transform_values { |us| us.round(1) }
      rescue => e
        Format.error(e)
      end

      def us(store)
        1e6 / @cells.fetch([CASE, store]).ips
      end

      # [µs per get, benchmark-ips error %] for gets of keys never written.
      def sql_read_miss
        store = SQL.new(@env)
        Workload.new(Cases.find(CASE), store, prefix: "sb:#{@env.nonce}:#{SQL::NAME}").prepare
        misses = ReadMisses.new(store, "sb:#{@env.nonce}:#{SQL::NAME}:#{CASE}:absent")
        report = Benchmark.ips(quiet: true) do |x|
          x.config(warmup: @warmup, time: @time)
          x.report("sql read miss") { |times| misses.run(times) }
        end
        entry = report.entries.first
        [1e6 / entry.ips, entry.error_percentage]
      ensure
        store&.close
      end

      # Reads of fresh keys, each a genuine miss; raises if one is found.
      class ReadMisses
        def initialize(store, prefix)
          @store = store
          @prefix = prefix
          @seq = 0
        end

        def run(times)
          store, prefix = @store, @prefix
          seq = @seq
          stop = seq + times
          while seq < stop
            seq += 1
            raise Workload::WrongValue, "a key never written was found" unless store.read("#{prefix}#{seq}").nil?
          end
          @seq = seq
        end
      end
    end
  end
end
