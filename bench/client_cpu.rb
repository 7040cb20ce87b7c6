# frozen_string_literal: true

require_relative "cpu_sample"
require_relative "stores"
require_relative "workload"

module Strata
  module Bench
    # The client CPU pass: after the ips matrix, each memcached client store (Stores::CLIENTS) runs
    # each of a few cases for a fixed time, and the process CPU clock says how much of each call's
    # cost was this process's work (the rest of the wall time is the network and memcached).
    # Process CPU time includes GC, which a client's allocations cause, and nothing else runs
    # in this process meanwhile.
    class ClientCpu
      CASES = %w[hit_30b hit_25kb set_30b set_25kb get_multi_100].freeze

      # Seconds measured per cell.
      QUICK = 0.5
      FULL = 1.5

      # Calls between clock reads; small enough that a cell overshoots its time by a few ms only.
      BATCH = 100
      # Calls run before measuring: connections open, buffers grown, methods warmed.
      WARMUP_CALLS = 500

      def initialize(env, seconds:, progress: $stderr)
        @env = env
        @seconds = seconds
        @progress = progress
      end

      # cases: Case list; stores: adapter classes that can run here. Only the cells in CASES and
      # Stores::CLIENTS run. Returns a CpuSample per cell, case-major.
      def run(cases, stores)
        cases = cases.select { |kase| CASES.include?(kase.name) }
        stores = stores.select { |store| Stores::CLIENTS.include?(store::NAME) }
        return [] if cases.empty? || stores.empty?

        @progress.puts "client CPU pass (#{@seconds} s per cell)"
        cases.flat_map do |kase|
          stores.map do |store_class|
            sample = measure(kase, store_class)
            @progress.puts format("  %-14s %-16s %s", kase.name, store_class::NAME, note(sample))
            sample
          end
        end
      end

      def measure(kase, store_class)
        base = {store: store_class::NAME, case_name: kase.name}
        store = store_class.new(@env)
        workload = Workload.new(kase, store, prefix: "sb:#{@env.nonce}:cpu:#{store_class::NAME}").prepare
        workload.run(WARMUP_CALLS)
        GC.start
        CpuSample.new(**base, **timed(workload))
      rescue => e
        CpuSample.new(**base, error: "#{e.class}: #{e.message.lines.first&.strip}")
      ensure
        store&.close
      end

      private

      def timed(workload)
        ops = 0
        wall_start = now
        cpu_start = cpu_now
        deadline = wall_start + @seconds
        while now < deadline
          workload.run(BATCH)
          ops += BATCH
        end
        {ops: ops, cpu_s: cpu_now - cpu_start, wall_s: now - wall_start}
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end

      def cpu_now
        Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
      end

      def note(sample)
        return "error: #{sample.error}" unless sample.ok?

        format("%8.2f µs CPU/call  %8.2f µs wall/call  (%d calls)", sample.cpu_us_per_op, sample.wall_us_per_op,
          sample.ops)
      end
    end
  end
end
