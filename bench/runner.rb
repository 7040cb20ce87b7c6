# frozen_string_literal: true

require "benchmark/ips"
require_relative "format"
require_relative "result"
require_relative "workload"

module Strata
  module Bench
    # Measures each (case, store) cell with benchmark-ips and prints one progress line per cell to
    # stderr. Every cell gets a freshly opened store, so no cell inherits another's evictions.
    class Runner
      # Seconds of warmup and of measurement per cell. QUICK is a smoke test: its figures are rough,
      # and cells that allocate 25 KiB per call can still be in the allocator's page-fault phase.
      QUICK = {warmup: 0.2, time: 0.5}.freeze
      FULL = {warmup: 1.0, time: 2.5}.freeze

      def initialize(env, warmup:, time:, progress: $stderr)
        @env = env
        @warmup = warmup
        @time = time
        @progress = progress
      end

      # cases: Case list; stores: adapter classes that can run here. Returns a Result per cell,
      # case-major, in the order given.
      def run(cases, stores)
        total = cases.size * stores.size
        done = 0
        cases.map.with_index(1) do |kase, n|
          @progress.puts "#{kase.name} (case #{n}/#{cases.size}: #{kase.describe})"
          stores.map do |store_class|
            done += 1
            result = measure(kase, store_class)
            @progress.puts format("  [%2d/%d] %-16s %s", done, total, store_class::NAME, progress_note(result))
            result
          end
        end.flatten
      end

      def measure(kase, store_class)
        base = {store: store_class::NAME, case_name: kase.name, expected_hit_pct: kase.expected_hit_pct}
        store = store_class.new(@env)
        workload = Workload.new(kase, store, prefix: "sb:#{@env.nonce}:#{store_class::NAME}").prepare
        # Collect the garbage earlier cells left (a cleared MemoryStore, 25 KiB strings) so this
        # cell is not charged for it.
        GC.start
        settle(workload)
        entry = ips_entry(kase, store_class, workload)
        Result.new(**base, ips: entry.ips, error_pct: entry.error_percentage, hit_pct: workload.observed_hit_pct)
      rescue => e
        Result.new(**base, error: "#{e.class}: #{e.message.lines.first&.strip}")
      ensure
        store&.close
      end

      private

      # A fresh heap faults in new pages for its first tens of thousands of 25 KiB allocations
      # (about 12 us a fault on these VMs); a long-lived worker is past that. Run the workload in
      # batches until one stops faulting, bounded by a few warmup periods, so every store is
      # measured in its steady state.
      SETTLE_BATCH = 5_000
      SETTLED_FAULTS = SETTLE_BATCH / 100
      QUIET_BATCHES = 3 # faults come in bursts after a GC; one quiet batch proves little

      def settle(workload)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + @warmup * 5
        quiet = 0
        while quiet < QUIET_BATCHES && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
          faults = minor_faults
          workload.run(SETTLE_BATCH)
          quiet = (minor_faults - faults < SETTLED_FAULTS) ? quiet + 1 : 0
        end
      end

      # Minor page faults of this process so far (Linux); 0 elsewhere, which settles at once.
      def minor_faults
        File.read("/proc/self/stat").split(") ", 2).last.split[7].to_i
      rescue SystemCallError
        0
      end

      def ips_entry(kase, store_class, workload)
        report = Benchmark.ips(quiet: true) do |x|
          x.config(warmup: @warmup, time: @time)
          # The block form with an iteration count keeps benchmark-ips' own per-call cost out.
          x.report("#{kase.name}/#{store_class::NAME}") { |times| workload.run(times) }
        end
        report.entries.first
      end

      def progress_note(result)
        return "error: #{result.error}" unless result.ok?

        hits = result.hit_pct ? "  hits #{Format.pct(result.hit_pct)}" : ""
        flag = result.hit_mismatch? ? " (expected #{Format.pct(result.expected_hit_pct)})" : ""
        "#{Format.ips(result.ips).rjust(7)} i/s ±#{Format.pct(result.error_pct)}#{hits}#{flag}"
      end
    end
  end
end
