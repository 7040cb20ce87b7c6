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
      # Seconds of warmup and of measurement per cell, and the most spent settling it first. QUICK is
      # a smoke test: its figures are rough, and cells that allocate 25 KiB per call can still be in
      # the allocator's page-fault phase.
      QUICK = {warmup: 0.15, time: 0.4, settle: 0.4}.freeze
      FULL = {warmup: 1.0, time: 2.5, settle: 5.0}.freeze

      def initialize(env, warmup:, time:, settle: warmup * 5, progress: $stderr)
        @env = env
        @warmup = warmup
        @time = time
        @settle = settle
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
        store.check
        Result.new(**base, ips: entry.ips, error_pct: entry.error_percentage, hit_pct: workload.observed_hit_pct)
      rescue => e
        Result.new(**base, error: "#{e.class}: #{e.message.lines.first&.strip}")
      ensure
        store&.close
      end

      private

      # A fresh heap faults in new pages for its first tens of thousands of 25 KiB allocations
      # (about 12 us a fault on these VMs); a long-lived worker is past that. Run the workload in
      # batches until one stops faulting, bounded by @settle seconds, so every store is measured in
      # its steady state. Batches run in chunks with the deadline checked between them: a batch of
      # a slow cell (get_multi_100 over the network, a few hundred calls a second) would otherwise
      # overrun it tenfold.
      SETTLE_BATCH = 5_000
      SETTLE_CHUNK = 250
      SETTLED_FAULTS = SETTLE_BATCH / 100
      QUIET_BATCHES = 3 # faults come in bursts after a GC; one quiet batch proves little

      def settle(workload)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + @settle
        quiet = 0
        while quiet < QUIET_BATCHES
          faults = minor_faults
          return unless settle_batch(workload, deadline)

          quiet = (minor_faults - faults < SETTLED_FAULTS) ? quiet + 1 : 0
        end
      end

      # One SETTLE_BATCH of calls; false when the deadline came first.
      def settle_batch(workload, deadline)
        (SETTLE_BATCH / SETTLE_CHUNK).times do
          return false if Process.clock_gettime(Process::CLOCK_MONOTONIC) >= deadline

          workload.run(SETTLE_CHUNK)
        end
        true
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
