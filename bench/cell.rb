# frozen_string_literal: true

require "benchmark/ips"
require_relative "format"
require_relative "result"
require_relative "workload"

module Strata
  module Bench
    # One (case, store) cell of the matrix while it is measured: a freshly opened store with its
    # workload filled and settled, the ips of each round measured so far, and the Result they
    # make. The Runner keeps every cell of a case open and measures them in alternating rounds.
    class Cell
      # A fresh heap faults in new pages for its first tens of thousands of 25 KiB allocations
      # (about 12 us a fault on these VMs); a long-lived worker is past that. Run the workload in
      # batches until one stops faulting, bounded by the settle time, so every store is measured in
      # its steady state. Batches run in chunks with the deadline checked between them: a batch of
      # a slow cell (get_multi_100 over the network, a few hundred calls a second) would otherwise
      # overrun it tenfold.
      SETTLE_BATCH = 5_000
      SETTLE_CHUNK = 250
      SETTLED_FAULTS = SETTLE_BATCH / 100
      QUIET_BATCHES = 3 # faults come in bursts after a GC; one quiet batch proves little

      attr_reader :store_class

      def initialize(env, kase, store_class)
        @env = env
        @kase = kase
        @store_class = store_class
        @rounds = []
        @error = nil
        @store = nil
      end

      # Opens the store, fills it and settles it; settle: seconds at most. A failure makes the cell
      # an error cell, which measures nothing more.
      def open(settle:)
        @store = @store_class.new(@env)
        @workload = Workload.new(@kase, @store, prefix: "sb:#{@env.nonce}:#{@store_class::NAME}").prepare
        # Collect the garbage earlier cells left (a cleared MemoryStore, 25 KiB strings) so this
        # cell is not charged for it.
        GC.start
        settle_workload(settle)
      rescue => e
        fail_with(e)
      end

      # One benchmark-ips measurement; its ips joins the rounds.
      def measure_round(warmup:, time:)
        return if @error

        GC.start # the garbage of the cell measured just before is not this one's
        report = Benchmark.ips(quiet: true) do |x|
          x.config(warmup: warmup, time: time)
          # The block form with an iteration count keeps benchmark-ips' own per-call cost out.
          x.report("#{@kase.name}/#{@store_class::NAME}") { |times| @workload.run(times) }
        end
        @rounds << report.entries.first.ips
      rescue => e
        fail_with(e)
      end

      # The median round's ips, and as its error half the spread of the rounds (in % of the median);
      # the Result keeps every round's ips, in the order measured.
      def result
        base = {store: @store_class::NAME, case_name: @kase.name, expected_hit_pct: @kase.expected_hit_pct}
        return Result.new(**base, error: @error) if @error
        return Result.new(**base, error: "no round measured") if @rounds.empty?

        @store.check
        rounds = @rounds.sort
        median = rounds[rounds.size / 2]
        spread = (rounds.last - rounds.first) / 2.0 / median * 100
        Result.new(**base, ips: median, error_pct: spread, rounds: @rounds.dup, hit_pct: @workload.observed_hit_pct)
      rescue => e
        Result.new(**base, error: Format.error(e))
      end

      def close
        @store&.close
        @store = nil
      end

      private

      def fail_with(error)
        @error = Format.error(error)
        close
      end

      def settle_workload(seconds)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
        quiet = 0
        while quiet < QUIET_BATCHES
          faults = minor_faults
          return unless settle_batch(deadline)

          quiet = (minor_faults - faults < SETTLED_FAULTS) ? quiet + 1 : 0
        end
      end

      # One SETTLE_BATCH of calls; false when the deadline came first.
      def settle_batch(deadline)
        (SETTLE_BATCH / SETTLE_CHUNK).times do
          return false if Process.clock_gettime(Process::CLOCK_MONOTONIC) >= deadline

          @workload.run(SETTLE_CHUNK)
        end
        true
      end

      # Minor page faults of this process so far (Linux); 0 elsewhere, which settles at once.
      def minor_faults
        File.read("/proc/self/stat").split(") ", 2).last.split[7].to_i
      rescue SystemCallError
        0
      end
    end
  end
end
