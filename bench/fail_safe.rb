# frozen_string_literal: true

require_relative "format"
require_relative "stores"
require_relative "text_table"

module Strata
  module Bench
    # fail_safe: through an outage (docs/coherence.md, "Fail-safe"), on the embedded default
    # store (L1 + SQLite): an entry expires, then every fetch's block raises for the outage's
    # length while one process fetches it in a loop. Goals: every answer is the last good value,
    # no exception reaches the caller, one report, and the block runs about once per
    # fail_safe_throttle.
    class FailSafeReport
      DEFAULTS = {outage: 5.0, throttle: 1.0}.freeze
      QUICK_OUTAGE = 1.0
      KEY = "bench:fail_safe:page"
      GOOD = "the last good page"

      # An error_reporter subscriber that counts what it is told.
      class Reports
        attr_reader :count

        def initialize
          @count = 0
        end

        def report(*, **)
          @count += 1
        end
      end

      def initialize(env, quick: false, **options)
        @env = env
        @options = DEFAULTS.merge(options.slice(*DEFAULTS.keys))
        @options[:outage] = QUICK_OUTAGE if quick
      end

      # A Hash for the JSON report (string keys); ::lines renders it.
      def run
        store = Stores::StrataStore.new(@env)
        cache = store.cache
        options = {expires_in: 0.05, fail_safe: 60, fail_safe_throttle: @options[:throttle]}
        cache.fetch(KEY, **options) { GOOD }
        expired_by = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 1
        Thread.pass while cache.read(KEY, fail_safe: 60) && Process.clock_gettime(Process::CLOCK_MONOTONIC) < expired_by
        outage(cache, options)
      ensure
        store&.close
      end

      def self.lines(section)
        rows = [["answers", section["answers"].to_s, ""],
          ["answered the last good value", section["last_good"].to_s, "all"],
          ["exceptions that reached the caller", section["raised"].to_s, "0"],
          ["reports to ActiveSupport.error_reporter", section["reports"].to_s, "1"],
          ["block runs", section["block_runs"].to_s, "about #{section["expected_runs"]}"],
          ["p50 / p99 of an answer", "#{Format.significant(section["p50_us"])} / #{Format.significant(section["p99_us"])} µs", ""]]
        ["fail_safe: #{section["outage_s"]} s during which every block raises, one process fetching one expired " \
          "entry in a loop (L1 + SQLite, fail_safe_throttle #{section["throttle_s"]} s)",
          TextTable.render(["", "measured", "goal"], rows).gsub(/^/, "  ")]
      end

      private

      def outage(cache, options)
        reports = Reports.new
        ActiveSupport.error_reporter.subscribe(reports)
        answers = last_good = raised = runs = 0
        times = []
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + @options[:outage]
        while (started = Process.clock_gettime(Process::CLOCK_MONOTONIC)) < deadline # bound: the outage's length
          begin
            value = cache.fetch(KEY, **options) do
              runs += 1
              raise IOError, "the database is down"
            end
            answers += 1
            last_good += 1 if value == GOOD
          rescue IOError
            raised += 1
          end
          times << Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
        end
        times.sort!
        {"outage_s" => @options[:outage], "throttle_s" => @options[:throttle], "answers" => answers, "last_good" => last_good,
         "raised" => raised, "reports" => reports.count, "block_runs" => runs,
         "expected_runs" => (@options[:outage] / @options[:throttle]).ceil,
         "p50_us" => (percentile(times, 0.5) * 1e6).round(1), "p99_us" => (percentile(times, 0.99) * 1e6).round(1)}
      ensure
        ActiveSupport.error_reporter.unsubscribe(reports)
      end

      def percentile(sorted, fraction)
        return 0.0 if sorted.empty?

        sorted[[(sorted.size * fraction).ceil - 1, 0].max]
      end
    end
  end
end
