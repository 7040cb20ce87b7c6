# frozen_string_literal: true

require "etc"
require "optparse"
require "time"
require_relative "cases"
require_relative "demo_bench"
require_relative "fail_safe"
require_relative "hot_page"
require_relative "research/client_cpu"
require_relative "research/client_cpu_report"
require_relative "environment"
require_relative "format"
require_relative "hit_ratio"
require_relative "host_load"
require_relative "json_report"
require_relative "l1_footprint"
require_relative "research/miss_cost"
require_relative "multi_process"
require_relative "report"
require_relative "runner"
require_relative "servers"
require_relative "staleness"
require_relative "coherence"
require_relative "stores"
require_relative "svg_plot"
require_relative "tag_cost"
require_relative "targets"

module Strata
  module Bench
    # bin/bench: parses options, runs the L1 reports and the matrix, prints the table, then the
    # reports, and writes JSON and charts when asked. Progress and notes go to stderr, results to
    # stdout.
    #
    # With no options the stores a Rails app chooses between run (Stores::DEFAULT), with
    # Runner::STANDARD timing: a few minutes. Without STRATA_MEMCACHED (and STRATA_POSTGRES_URL,
    # for the staleness report) the run starts servers of its own (Servers); the stores that need
    # memcached are skipped with a note when none answers. --full runs every store with longer
    # cells, and the research reports (client CPU, miss cost) whose conclusions
    # docs/benchmarks.md keeps.
    class CLI
      # Extra reports tied to strata_l1; they run when strata_l1 is selected and loads.
      EXTRAS = {two_process: MultiProcess, hit_ratio: HitRatio, l1_footprint: L1Footprint}.freeze
      # Reports tied to strata_store (L1 + SQLite, and L1 alone); they run when it is selected and loads.
      STORE_EXTRAS = {tag_hit_cost: TagHitCost, tag_invalidate_cost: TagInvalidateCost,
                      cross_host_staleness: CrossHostStaleness, coherence: Coherence, fail_safe: FailSafeReport,
                      hot_page: HotPageReport}.freeze
      REPORTS = EXTRAS.merge(STORE_EXTRAS).freeze
      # The reports' timing in the default run (each report's own DEFAULTS, longer, with --full;
      # each takes the keys it has): seconds per timed cell or process run, its warmup, the most a
      # cell settles first, and the staleness report's rounds (80 with --full: each takes about
      # 0.2 s, and of 40 the p99 is the slowest, so the figure errs long if anything).
      # The coherence run takes run_seconds (30 with --full).
      REPORT_STANDARD = {seconds: 1.2, warmup: 0.3, settle: 1.0, rounds: 40, run_seconds: 12}.freeze

      def initialize(argv, out: $stdout, err: $stderr)
        @argv = argv
        @out = out
        @err = err
      end

      # The process exit status: 0, or 2 for a usage error.
      def run
        options = parse
        return 0 unless options
        if options[:demo]
          return Servers.around(postgres: false, err: @err) { DemoBench.run(quick: options[:quick], out: @out, err: @err) }
        end

        staleness = options[:reports] && options[:stores].include?(Stores::StrataStore::NAME)
        Servers.around(postgres: staleness, err: @err) { Environment.open { |env| bench(env, options) } }
        0
      rescue OptionParser::ParseError => e
        @err.puts "bin/bench: #{e.message}\n#{@usage}"
        2
      end

      private

      def parse
        options = {quick: false, full: false, reports: true, stores: nil, cases: Cases.names}
        parser = OptionParser.new do |o|
          o.banner = "Usage: bin/bench [options]\nRuns every case on the stores a Rails app chooses between, with benchmark-ips."
          o.on("--quick", "short warmup and measurement (CI smoke test; nothing is asserted)") { options[:quick] = true }
          o.on("--full", "every store, longer cells, and the research reports (client CPU, miss cost)") do
            options[:full] = true
          end
          o.on("--demo", "instead, the demo app's bench (demo/bench.rb): an entry and a page of 75 over HTTP " \
            "against Puma, with no cache, an in-process Hash, Strata L1 and L1 + memcached (docs/demo.md); of the other options only --quick applies") do
            options[:demo] = true
          end
          o.on("--json FILE", "also write the results as JSON") { |file| options[:json] = file }
          o.on("--plot DIR", "also write one SVG chart per case into DIR") { |dir| options[:plot] = dir }
          o.on("--stores LIST", Array, "only these stores (default #{Stores.default_names.join(",")}; " \
            "also #{(Stores.names - Stores.default_names).join(",")})") { |l| options[:stores] = l }
          o.on("--cases LIST", Array, "only these cases (#{Cases.names.join(",")})") { |l| options[:cases] = l }
          o.on("--[no-]reports", "two-process, hit-ratio and footprint reports (default on; need strata_l1 or strata_store_l1), " \
            "tag hit and invalidate_tags cost, cross-host staleness and the coherence run (need strata_store); " \
            "the targets report follows the stores and cases run") do |on|
            options[:reports] = on
          end
          o.on("-h", "--help", "this text") do
            @out.puts o
            return nil
          end
        end
        @usage = parser.to_s
        parser.parse!(@argv)
        raise OptionParser::NeedlessArgument, @argv.join(" ") unless @argv.empty?
        raise OptionParser::AmbiguousOption, "--quick and --full" if options[:quick] && options[:full]

        options[:stores] ||= options[:full] ? Stores.names : Stores.default_names

        check_names(options[:stores], Stores.names, "store")
        check_names(options[:cases], Cases.names, "case")
        options
      end

      def check_names(given, known, what)
        unknown = given - known
        return if unknown.empty?

        raise OptionParser::InvalidArgument, "unknown #{what} #{unknown.join(", ")} (#{what}s: #{known.join(", ")})"
      end

      def bench(env, options)
        timing = timing(options)
        cases = options[:cases].map { |name| Cases.find(name) }
        stores, skipped = select_stores(env, options[:stores])
        meta = meta(env, options, timing)
        @out.puts header(meta)
        # Progress goes to stderr as it happens; keep stdout in step when both go to one log.
        @out.flush
        # The reports run before the matrix, so the processes the two-process report forks start
        # from a small heap rather than copy-on-write faulting through one the matrix grew.
        extras = options[:reports] ? run_extras(env, options, stores) : {}
        results = Runner.new(env, **timing, progress: @err).run(cases, stores)
        targets = Targets.new(results)
        @out.puts
        @out.print Report.new(results, case_names: cases.map(&:name), store_names: stores.map { |s| s::NAME },
          skipped: skipped, rounds: timing.fetch(:rounds, Runner::ROUNDS)).render
        print_section(targets.render)
        sections = {targets: targets.to_json_section}
        sections.merge!(research(env, options, cases, stores, results, skipped, timing)) if options[:full]
        print_extras(extras)
        write_outputs(options, cases, results, skipped, extras.merge(sections), meta)
      end

      def timing(options)
        return Runner::QUICK if options[:quick]

        options[:full] ? Runner::FULL : Runner::STANDARD
      end

      # The research reports, printed; their JSON sections. They answered how the memcached clients
      # spend CPU and what a miss costs beyond the block (docs/benchmarks.md); --full runs them
      # again.
      def research(env, options, cases, stores, results, skipped, timing)
        cpu = ClientCpuReport.new(ClientCpu.new(env, seconds: cpu_seconds(options), progress: @err).run(cases, stores))
        miss_cost = MissCost.new(env, results, skipped: skipped, warmup: timing[:warmup], time: timing[:time],
          progress: @err).run
        print_section(cpu.render)
        print_section(MissCost.lines(miss_cost).join("\n") + "\n")
        {client_cpu: cpu.to_json_section, miss_cost: miss_cost}
      end

      def cpu_seconds(options)
        options[:quick] ? ClientCpu::QUICK : ClientCpu::FULL
      end

      # A report's text after a blank line; nothing when it is empty.
      def print_section(text)
        return if text.empty?

        @out.puts
        @out.print text
      end

      # Adapter classes that can run here, and name => reason for the others.
      def select_stores(env, names)
        skipped = {}
        stores = names.map { |name| Stores.find(name) }.select do |store|
          reason = store.unavailable_reason(env)
          @err.puts "skipping #{store::NAME}: #{reason}" if reason
          skipped[store::NAME] = reason if reason
          reason.nil?
        end
        [stores, skipped]
      end

      # The reports whose store is among those that run.
      def run_extras(env, options, stores)
        reports = {}
        reports.merge!(EXTRAS) if stores.include?(Stores::StrataL1) || stores.include?(Stores::StrataStoreL1)
        reports.merge!(STORE_EXTRAS) if stores.include?(Stores::StrataStore)
        settings = if options[:quick]
          {seconds: 0.5, warmup: 0.1, quick: true}
        else
          options[:full] ? {} : REPORT_STANDARD
        end
        reports.to_h do |name, report_class|
          @err.print "report: #{name}"
          started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          section = begin
            report_class.new(env, **settings).run
          rescue => e
            {error: Format.error(e)}
          end
          @err.puts format(" (%.1f s)", Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
          [name, section]
        end
      end

      def print_extras(extras)
        extras.each do |name, section|
          @out.puts
          @out.puts(section[:error] ? "#{name}: failed (#{section[:error]})" : REPORTS.fetch(name).lines(section))
        end
      end

      def write_outputs(options, cases, results, skipped, extras, meta)
        if options[:json]
          JsonReport.write(options[:json], results: results, skipped: skipped, extras: extras, meta: meta)
          @err.puts "wrote #{options[:json]}"
        end
        return unless options[:plot]

        paths = SvgPlot.new(results, cases: cases).write(options[:plot])
        @err.puts "wrote #{paths.size} charts to #{options[:plot]}"
      end

      def meta(env, options, timing)
        {
          ruby: RUBY_DESCRIPTION, activesupport: gem_version("activesupport"), dalli: gem_version("dalli"),
          benchmark_ips: gem_version("benchmark-ips"), cache_format_version: ActiveSupport::Cache.format_version,
          quick: options[:quick], full: options[:full], warmup_s: timing[:warmup], time_s: timing[:time], settle_max_s: timing[:settle],
          client_cpu_s: (cpu_seconds(options) if options[:full]), cpus: Etc.nprocessors,
          idle_cpus_before: HostLoad.idle_cpus,
          memcached: env.memcached_servers, scratch_dir: env.scratch_description, started_at: Time.now.utc.iso8601
        }
      end

      def header(meta)
        "strata bench#{" --quick" if meta[:quick]}#{" --full" if meta[:full]}: #{meta[:ruby]}\n" \
          "activesupport #{meta[:activesupport]} (cache format #{meta[:cache_format_version]}), " \
          "dalli #{meta[:dalli]}, benchmark-ips #{meta[:benchmark_ips]}, " \
          "#{meta[:cpus]} CPUs (#{meta[:idle_cpus_before] || "?"} idle at start)\n" \
          "memcached #{meta[:memcached].join(", ")}; #{meta[:scratch_dir]}; " \
          "warmup #{meta[:warmup_s]} s, time #{meta[:time_s]} s per cell"
      end

      def gem_version(name)
        Gem.loaded_specs[name]&.version&.to_s || "not loaded"
      end
    end
  end
end
