# frozen_string_literal: true

require_relative "cell"
require_relative "format"
require_relative "result"

module Strata
  module Bench
    # Measures each (case, store) cell with benchmark-ips and prints one progress line per cell to
    # stderr. Every cell gets a freshly opened store (a Cell), so no cell inherits another's
    # evictions. The cells of a case are open together and measured in ROUNDS alternating
    # rounds, each a share of the cell's time, and a cell's figure is its median round: a
    # slow spell on the shared machine then lands on every store of the case alike, instead of
    # on whichever store it happened to meet, and the ratios between stores hold steadier.
    # Every other round runs the cells in reverse order, so no store always goes first, or always
    # right after the same neighbour and the garbage and cache footprint that one leaves.
    class Runner
      # Seconds of warmup and of measurement per cell (split over the rounds), and the most spent
      # settling it first. QUICK is a smoke test: its figures are rough, and cells that allocate
      # 25 KiB per call can still be in the allocator's page-fault phase.
      # STANDARD is bin/bench's default, FULL its --full.
      QUICK = {warmup: 0.15, time: 0.4, settle: 0.4, rounds: 3, settle_large_writes: false}.freeze
      STANDARD = {warmup: 0.1, time: 0.5, settle: 0.3, rounds: 4}.freeze
      FULL = {warmup: 1.0, time: 2.5, settle: 5.0}.freeze
      # Seven: the median then survives three rounds caught in a slow spell, and Targets has seven
      # pairs of rounds to take the median ratio of. (Five survived two.)
      ROUNDS = 7
      # The least a write case of 25 KiB values settles a cell (unless the run's
      # settle_large_writes is false: --quick), in seconds. A cell stops settling as soon as its page faults
      # stop, but the first pass of 25 KiB writes through a fresh 128 MiB L1 table faults for
      # about a second on these VMs; a long-lived host's table is past it.
      LARGE_WRITE_SETTLE = 2.0

      # The cells of a case in the order round (0-based) measures them: as given, and reversed
      # every other round. The client CPU pass takes its turns in the same order.
      def self.round_order(cells, round)
        round.odd? ? cells.reverse : cells
      end

      # rounds: ROUNDS unless a report needs only a rough figure quickly.
      def initialize(env, warmup:, time:, settle: warmup * 5, rounds: ROUNDS, settle_large_writes: true, progress: $stderr)
        @env = env
        @settle_large_writes = settle_large_writes
        @rounds = rounds
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
          @progress.puts "#{kase.name} (case #{n}/#{cases.size}: #{kase.describe}; #{@rounds} rounds)"
          started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          results = measure_case(kase, stores)
          results.each do |result|
            done += 1
            @progress.puts format("  [%2d/%d] %-16s %s", done, total, result.store, progress_note(result))
          end
          @progress.puts format("  (%.1f s)", Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
          results
        end.flatten
      end

      # The Results of every store on kase, in the order of stores.
      def measure_case(kase, stores)
        cells = stores.map { |store_class| Cell.new(@env, kase, store_class) }
        settle = (kase.op == :write && kase.value_size >= 16_384 && @settle_large_writes) ? [@settle, LARGE_WRITE_SETTLE].max : @settle
        cells.each { |cell| cell.open(settle: settle) }
        @rounds.times do |round|
          Runner.round_order(cells, round).each do |cell|
            cell.measure_round(warmup: @warmup / @rounds, time: @time / @rounds)
          end
        end
        cells.map(&:result)
      ensure
        cells&.each(&:close)
      end

      private

      def progress_note(result)
        return "error: #{result.error}" unless result.ok?

        hits = result.hit_pct ? "  hits #{Format.pct(result.hit_pct)}" : ""
        flag = result.hit_mismatch? ? " (expected #{Format.pct(result.expected_hit_pct)})" : ""
        "#{Format.ips(result.ips).rjust(7)} i/s ±#{Format.pct(result.error_pct)}#{hits}#{flag}"
      end
    end
  end
end
