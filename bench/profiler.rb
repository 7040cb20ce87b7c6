# frozen_string_literal: true

require "fileutils"
require "stackprof"
require_relative "cases"
require_relative "stores"
require_relative "workload"

module Strata
  module Bench
    # Runs one (case, store) cell of the matrix under stackprof with raw samples, and writes:
    #   NAME.dump    stackprof's own format: `stackprof NAME.dump --text`, `--method`, `--d3-flamegraph`
    #   NAME.folded  collapsed stacks, one per line: flamegraph.pl, speedscope, inferno
    #   NAME.html    stackprof's d3 flame graph page (loads d3 from a CDN when opened)
    # then prints the top frames.
    class Profiler
      # The store cannot run on this host (a server is down, Strata's code does not load).
      class Unavailable < StandardError; end

      MODES = %w[cpu wall object].freeze

      DEFAULTS = {
        mode: "cpu",
        seconds: 5.0,
        # Untimed iterations first, so one-off work (first page faults, method caches) stays out.
        warmup: 0.5,
        # Sample period: microseconds for cpu and wall, allocations for object (every 20th by
        # default: every allocation makes a profile of millions of stacks).
        # cpu mode uses ITIMER_PROF, which on most kernels ticks no finer than 1-4 ms whatever is
        # asked; wall mode has a fine timer.
        interval: nil,
        out: File.expand_path("../tmp/profile", __dir__),
        top: 20
      }.freeze

      DEFAULT_INTERVAL = {"cpu" => 1000, "wall" => 250, "object" => 20}.freeze

      # Iterations between clock reads; the clock stays a small share of the profile.
      BATCH = 200

      def initialize(env, case_name:, store_name:, io: $stdout, **options)
        @env = env
        @kase = Cases.find(case_name)
        @store_class = Stores.find(store_name)
        @io = io
        @options = DEFAULTS.merge(options.slice(*DEFAULTS.keys))
        raise ArgumentError, "mode must be one of #{MODES.join(", ")}" unless MODES.include?(@options[:mode])
      end

      # The paths written.
      def run
        reason = @store_class.unavailable_reason(@env)
        raise Unavailable, "#{@store_class::NAME} cannot run here: #{reason}" if reason

        store = @store_class.new(@env)
        workload = Workload.new(@kase, store, prefix: "sp:#{@env.nonce}:#{@store_class::NAME}").prepare
        run_for(workload, @options[:warmup])
        data = StackProf.run(mode: @options[:mode].to_sym, raw: true, interval: interval) do
          run_for(workload, @options[:seconds])
        end
        paths = write(data)
        StackProf::Report.new(data).print_text(false, @options[:top], nil, nil, nil, nil, @io)
        paths
      ensure
        store&.close
      end

      private

      def interval
        @options[:interval] || DEFAULT_INTERVAL.fetch(@options[:mode])
      end

      def run_for(workload, seconds)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
        workload.run(BATCH) while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      end

      def write(data)
        FileUtils.mkdir_p(@options[:out])
        base = File.join(@options[:out], "#{@kase.name}-#{@store_class::NAME}-#{@options[:mode]}")
        File.binwrite("#{base}.dump", Marshal.dump(data))
        File.write("#{base}.folded", collapsed(data))
        File.open("#{base}.html", "w") { |f| StackProf::Report.new(data).print_d3_flamegraph(f) }
        %w[dump folded html].map { |ext| "#{base}.#{ext}" }
      end

      # Collapsed stacks: "outer;...;inner count" per line. stackprof's own printer shifts the
      # front off the raw array, quadratic on an object-mode profile, so this walks it by index.
      # raw is a run of [depth, frame ids outermost first..., sample count]; one pass, O(samples).
      def collapsed(data)
        frames = data[:frames]
        raw = data[:raw] || []
        out = +""
        i = 0
        while (depth = raw[i])
          names = raw[i + 1, depth].map { |id| frames.dig(id, :name) || id.to_s }
          out << names.join(";") << " " << raw[i + 1 + depth].to_s << "\n"
          i += depth + 2
        end
        out
      end
    end
  end
end
