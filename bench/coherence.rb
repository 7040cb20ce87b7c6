# frozen_string_literal: true

require "tmpdir"
require "fileutils"
require_relative "format"
require_relative "text_table"

module Strata
  module Bench
    # The randomized coherence run (test/support/coherence_run.rb; docs/coherence.md, "The
    # ordering rule"), long: three hosts with L1 files of their own over memcached (latency
    # 0-10 ms; paths cut, memcached stopped and a second worker of one host killed with kill -9,
    # at random in the second half) and PostgreSQL,
    # owners changing keys while every host fills and reads them. Counts the stale answers
    # past each bound outside the faults, those past the run's bound during them, and those
    # left when the hosts have been quiet, and the reads out of order (an older value after the
    # change reached the host): the goal is 0 past the bound, 0 out of order and 0 left. Needs
    # PostgreSQL (STRATA_POSTGRES_URL, which bin/bench sets when it starts its own).
    class Coherence
      DEFAULTS = {run_seconds: 30}.freeze
      QUICK_SECONDS = 4
      BOUND = 0.5

      def initialize(_env, quick: false, **options)
        @seconds = quick ? QUICK_SECONDS : DEFAULTS.merge(options.slice(*DEFAULTS.keys))[:run_seconds]
      end

      # A Hash for the JSON report (string keys); ::lines renders it.
      def run
        url = ENV["STRATA_POSTGRES_URL"].to_s
        return {"skipped" => "no PostgreSQL (STRATA_POSTGRES_URL)"} if url.empty?

        $LOAD_PATH.unshift(File.expand_path("../test", __dir__)) unless $LOAD_PATH.include?(File.expand_path("../test", __dir__))
        require "support/coherence_run"
        self.class.const_set(:Record, Class.new(ActiveRecord::Base) { self.abstract_class = true }) unless self.class.const_defined?(:Record, false)
        dir = Dir.mktmpdir("strata-coherence")
        seed = Random.new_seed % 1_000_000
        result = TestSupport::CoherenceRun.new(record_class: self.class::Record, url: url, dir: dir, seconds: @seconds, seed: seed,
          bound: BOUND).run
        {"seed" => seed, "bound_s" => BOUND, **result.to_h.transform_keys(&:to_s),
         "stale" => result.stale.transform_keys { |bound| (bound * 1000).round.to_s }}
      ensure
        FileUtils.remove_entry(dir) if dir
      end

      def self.lines(section)
        return ["coherence run: skipped (#{section["skipped"]})"] if section["skipped"]

        stale = section["stale"]
        rows = [["reads", section["reads"].to_s], ["changes acknowledged", section["changes"].to_s],
          ["faults", section["faults"].map { |kind, n| "#{n} #{kind}" }.join(", ")]] +
          stale.map { |ms, n| ["stale past #{ms} ms, outside faults", n.to_s] } +
          [["latest of those (ms)", section["worst_ms"].to_s],
            ["stale past #{(section["bound_s"] * 1000).round} ms, during faults", section["stale_in_faults"].to_s],
            ["latest during faults (ms)", section["worst_in_faults_ms"].to_s],
            ["older than a change that reached the host", section["out_of_order"].to_s],
            ["older, a copy taken back and announced meanwhile", section["taken_back"].to_s],
            ["stale when quiet (for good)", "#{section["final_stale"]} of #{section["final_reads"]}"],
            ["errors", section["errors"].empty? ? "none" : section["errors"].join("; ")]]
        met = stale[(section["bound_s"] * 1000).round.to_s].zero? && section["out_of_order"].to_i.zero? && section["final_stale"].zero? &&
          section["errors"].empty?
        verdict = met ? "met" : "not met"
        ["coherence run (#{section["seconds"]} s, 3 hosts, L1 + memcached + PostgreSQL; seed #{section["seed"]}; " \
          "goal: 0 stale past #{(section["bound_s"] * 1000).round} ms, 0 out of order and 0 for good: #{verdict})",
          TextTable.render(["figure", "count"], rows).gsub(/^/, "  ")]
      end
    end
  end
end
