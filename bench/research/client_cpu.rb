# frozen_string_literal: true

require_relative "cpu_sample"
require_relative "../format"
require_relative "../runner"
require_relative "../stores"
require_relative "../workload"

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

        @progress.puts "client CPU pass (#{@seconds} s per cell, in #{Runner::ROUNDS} alternating rounds)"
        cases.flat_map do |kase|
          measure_case(kase, stores).each do |sample|
            @progress.puts format("  %-14s %-16s %s", kase.name, sample.store, note(sample))
          end
        end
      end

      # A CpuSample per store on kase. As in the ips matrix (Runner), the stores of a case are open
      # together and take turns, Runner::ROUNDS times in Runner.round_order, so that a slow spell
      # lands on all of them; a cell's figures are the sums of its rounds.
      def measure_case(kase, stores)
        cells = stores.to_h { |store_class| [store_class, open_cell(kase, store_class)] }
        Runner::ROUNDS.times do |round|
          Runner.round_order(cells.values, round).each do |cell|
            next if cell[:error]

            GC.start
            timed(cell[:workload], @seconds / Runner::ROUNDS).each { |figure, value| cell[figure] += value }
          rescue => e
            cell[:error] = Format.error(e)
          end
        end
        cells.map do |store_class, cell|
          base = {store: store_class::NAME, case_name: kase.name}
          cell[:error] ? CpuSample.new(**base, error: cell[:error]) : CpuSample.new(**base, **cell.slice(:ops, :cpu_s, :wall_s))
        end
      ensure
        cells&.each_value { |cell| cell[:store]&.close }
      end

      def open_cell(kase, store_class)
        cell = {ops: 0, cpu_s: 0.0, wall_s: 0.0}
        cell[:store] = store_class.new(@env)
        cell[:workload] = Workload.new(kase, cell[:store], prefix: "sb:#{@env.nonce}:cpu:#{store_class::NAME}").prepare
        cell[:workload].run(WARMUP_CALLS)
        cell
      rescue => e
        cell.merge(error: Format.error(e))
      end

      private

      def timed(workload, seconds)
        ops = 0
        wall_start = now
        cpu_start = cpu_now
        deadline = wall_start + seconds
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
