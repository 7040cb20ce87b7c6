# frozen_string_literal: true

require "open3"
require "optparse"
require "yaml"
require_relative "../environment"
require_relative "../text_table"
require_relative "measurement"

module Strata
  module Bench
    module Instructions
      # bin/instructions: counts the instructions per call of each operation (Operations) under
      # callgrind, prints them beside the committed baseline, and fails when one costs more than
      # TOLERANCE above it, printing that operation's profile. --update rewrites the baseline.
      #
      # Instructions, not seconds: callgrind counts what the CPU is asked to execute, which does
      # not move with the other processes on a shared machine, the clock or the cache, so a 5%
      # threshold holds without repeats. Syscalls count only their user-space side, so a memcached
      # round trip counts the client's CPU, not the network's.
      class Gate
        BASELINE = File.expand_path("baseline.yml", __dir__)
        DIR = File.expand_path("../../tmp/instructions", __dir__)

        # Above baseline * (1 + TOLERANCE) fails; below baseline * (1 - TOLERANCE) suggests
        # --update, so the baseline keeps up with improvements.
        TOLERANCE = 0.05

        # Functions of a regressed operation's profile printed.
        PROFILE_LINES = 25

        # The extension's sources as the compiler saw them from its build directory
        # (tmp/x86_64-linux-gnu/strata_ext/3.1.2/../../../../ext/strata/table.c): printed from ext/.
        BUILD_PREFIX = %r{\S*/(?:\.\./)+(?=ext/)}

        # Operations that need memcached; skipped with a note when it does not answer.
        MEMCACHED = %w[memcached_get memcached_set fetch_hit_memcached fetch_hit_l1_memcached_sql].freeze

        # measurement: answers run(names, run_index) -> {name => Measurement::Result}; baseline: the
        # baseline file's path. Both are for tests; bin/instructions takes the defaults.
        def initialize(argv, out: $stdout, err: $stderr, measurement: Measurement.new(DIR), baseline: BASELINE)
          @argv = argv
          @out = out
          @err = err
          @measurement = measurement
          @baseline = baseline
        end

        # The exit status: 0, 1 when an operation regressed or the probe failed, 2 on a usage error.
        def run
          options = parse
          return 0 unless options

          names = available(options[:operations])
          results = measure(names, options)
          return update(results) if options[:update]

          compare(results)
        rescue OptionParser::ParseError => e
          @err.puts "bin/instructions: #{e.message}\n#{@usage}"
          2
        rescue Measurement::Failed, Errno::ENOENT => e
          @err.puts "bin/instructions: #{e.message}"
          1
        end

        private

        def parse
          options = {operations: Operations::ALL.keys, repeat: 1, update: false}
          parser = OptionParser.new do |o|
            o.banner = "Usage: bin/instructions [--update] [--repeat K] [--operations a,b]"
            o.on("--update", "rewrite #{relative(@baseline)} with this run's counts") { options[:update] = true }
            o.on("--repeat K", Integer, "run the probe K times; show each run and the spread") do |k|
              raise OptionParser::InvalidArgument, "--repeat must be >= 1" unless k >= 1

              options[:repeat] = k
            end
            o.on("--operations LIST", Array, "only these (#{Operations::ALL.keys.join(", ")})") do |list|
              unknown = list - Operations::ALL.keys
              raise OptionParser::InvalidArgument, "unknown operations: #{unknown.join(", ")}" unless unknown.empty?

              options[:operations] = list
            end
            o.on("-h", "--help") do
              @out.puts o
              return nil
            end
          end
          @usage = parser.to_s
          parser.parse!(@argv.dup)
          options
        end

        # names less the memcached ones when memcached does not answer (with a note).
        def available(names)
          skipped, kept = names.partition { |name| MEMCACHED.include?(name) }
          return names if skipped.empty?

          reason = Environment.open { |env| env.memcached_unreachable_reason }
          return names unless reason

          @err.puts "bin/instructions: skipping #{skipped.join(", ")}: #{reason}"
          kept
        end

        # {name => Result} of the last run; with --repeat, each run's counts and their spread go
        # to the output first, and a Result's per_call is the median of the runs.
        def measure(names, options)
          runs = Array.new(options[:repeat]) { |index| @measurement.run(names, index + 1) }
          return runs.last if runs.size == 1

          print_runs(names, runs)
          runs.last.to_h do |name, result|
            counts = runs.map { |run| run[name].per_call }.sort
            [name, Measurement::Result.new(name, counts[counts.size / 2], result.profile)]
          end
        end

        def print_runs(names, runs)
          rows = names.map do |name|
            counts = runs.map { |run| run[name].per_call }
            median = counts.sort[counts.size / 2]
            [name, *counts.map { |count| count.round(1) }, format("%.3f%%", (counts.max - counts.min) / median * 100)]
          end
          header = ["operation", *runs.each_index.map { |i| "run #{i + 1}" }, "spread"]
          @out.puts "instructions per call, each run (spread: (max - min) / median)"
          @out.puts TextTable.render(header, rows)
          @out.puts
        end

        # Writes this run's counts over the baseline's; the others stay when they were counted on
        # this build (an --operations run), and go when they were not.
        def update(results)
          baseline = load_baseline
          kept = same_environment?(baseline) ? baseline["instructions"] || {} : {}
          counts = kept.merge(results.transform_values { |result| result.per_call.round })
          File.write(@baseline, <<~YAML + YAML.dump(environment.merge("instructions" => counts)).delete_prefix("---\n"))
            # Instructions per call of each operation of the gate (bench/instructions, docs/benchmarks.md),
            # counted by callgrind on the environment below. Written by `bin/instructions --update`:
            # a change that moves a count on purpose updates this file in the same commit.
          YAML
          @out.puts TextTable.render(%w[operation instructions], results.map { |name, r| [name, r.per_call.round] })
          @out.puts "wrote #{relative(@baseline)}"
          0
        end

        def compare(results)
          baseline = load_baseline
          unless same_environment?(baseline)
            @out.puts TextTable.render(%w[operation now], results.map { |name, r| [name, r.per_call.round] })
            @out.puts "not compared: #{relative(@baseline)} was counted on #{describe(baseline)}, " \
              "this is #{describe(environment)}; counts differ between builds (bin/instructions --update)"
            return 0
          end

          rows = results.map { |name, result| row(name, result, baseline.dig("instructions", name)) }
          @out.puts TextTable.render(["operation", "baseline", "now", "ratio", ""], rows)
          regressed = rows.select { |r| r[4] == "REGRESSED" }.map(&:first)
          faster = rows.select { |r| r[4] == "faster" }.map(&:first)
          unless faster.empty?
            @out.puts "#{faster.join(", ")}: more than #{percent} under the baseline; " \
              "bin/instructions --update records it"
          end
          return 0 if regressed.empty?

          regressed.each { |name| print_profile(name, results[name]) }
          @out.puts "FAILED: #{regressed.join(", ")} over the baseline by more than #{percent} " \
            "(a deliberate change runs bin/instructions --update and commits #{relative(@baseline)})"
          1
        end

        # [name, baseline, now, ratio, verdict]
        def row(name, result, before)
          now = result.per_call.round
          return [name, "-", now, "-", "new (no baseline: --update)"] unless before

          ratio = result.per_call / before
          verdict =
            if ratio > 1 + TOLERANCE then "REGRESSED"
            elsif ratio < 1 - TOLERANCE then "faster"
            else ""
            end
          [name, before, now, format("%.3fx", ratio), verdict]
        end

        def print_profile(name, result)
          @out.puts
          @out.puts "#{name}: the functions with the most instructions of its #{2 * Measurement::ITERATIONS} calls " \
            "(callgrind_annotate #{relative(result.profile)})"
          output, status = Open3.capture2e("callgrind_annotate", "--threshold=100", "--auto=no", result.profile)
          lines = output.lines
          # The table: after the header "Ir  file:function" and the dashed rule under it.
          header = lines.index { |line| line.include?("file:function") }
          return @out.puts(output) unless status.success? && header

          @out.puts lines[header]
          @out.puts lines[(header + 2)..].take_while { |line| !line.strip.empty? }.first(PROFILE_LINES)
            .map { |line| line.sub(BUILD_PREFIX, "") }
        end

        # What the counts depend on besides Strata's own code.
        def environment
          {"ruby" => RUBY_DESCRIPTION, "activesupport" => ActiveSupport.version.to_s}
        end

        def same_environment?(baseline)
          environment.all? { |key, value| baseline[key] == value }
        end

        def describe(env)
          "#{env["ruby"] || "?"} with Active Support #{env["activesupport"] || "?"}"
        end

        def load_baseline
          File.exist?(@baseline) ? YAML.safe_load_file(@baseline) || {} : {}
        end

        def percent
          "#{(TOLERANCE * 100).round}%"
        end

        def relative(path)
          path.delete_prefix("#{File.expand_path("../..", __dir__)}/")
        end
      end
    end
  end
end
