# frozen_string_literal: true

# What one VM-cache-invalidating call per request costs on this Ruby, after "Ruby global method
# cache invalidation impact on a single and multithreaded applications": the same simulated
# request served by 1 and by 10 threads, clean and with one invalidating call in it.
#
#   bundle exec ruby bench/research/vm_cache.rb [--quick]    (about 80 s; --quick: one round)
#
# Not part of bin/bench. Prints requests/s and the slowdown against the clean request on the
# same number of threads; the µs one call adds to a request (1 thread) next to what the call
# costs alone, the difference being what the invalidated caches cost the request; and which
# RubyVM.stat counters each call moves.

require "benchmark/ips"
require "ostruct"
require_relative "../paired_ratio"
require_relative "../text_table"
require_relative "../../lib/strata/vm_watch/counters"

module Strata
  module Bench
    module VMCache
      # The simulated request: 300 shapes of five classes, each asked for its area and its
      # perimeter through the base class's interface (five receiver classes per call site, kept
      # in runs so each site's inline cache mostly hits), every method reading a constant.
      module Shapes
        SCALE = 3
        UNIT = 2

        class Shape
          def initialize(size)
            @size = size
          end

          def cost
            area * SCALE + perimeter * UNIT
          end
        end

        class Square < Shape
          def area = @size * @size
          def perimeter = 4 * @size * UNIT
        end

        class Rectangle < Shape
          def area = @size * (@size + 1)
          def perimeter = (4 * @size + 2) * UNIT
        end

        class Triangle < Shape
          def area = @size * @size / 2
          def perimeter = 3 * @size * UNIT
        end

        class Hexagon < Shape
          def area = 3 * @size * @size * SCALE
          def perimeter = 6 * @size * UNIT
        end

        class Circle < Shape
          PI_NUM = 355
          PI_DEN = 113
          def area = PI_NUM * @size * @size / PI_DEN
          def perimeter = 2 * PI_NUM * @size / PI_DEN * UNIT
        end

        KINDS = [Square, Rectangle, Triangle, Hexagon, Circle].freeze
        ALL = KINDS.flat_map { |kind| Array.new(60) { |i| kind.new(i % 7 + 1) } }.freeze

        def self.request
          ALL.sum(&:cost)
        end
      end

      # A constant whose visibility is set per request (public_constant, which changes nothing
      # but still counts as a constant change, and is safe from any thread): on Ruby 3.1 every
      # inline constant cache goes with it (global_constant_state); on 3.2+ only the caches of
      # that name do.
      module Churn
        VALUE = 0
      end

      # The invalidating calls, one per request.
      CALLS = {
        "OpenStruct.new(a: 1)" => -> { OpenStruct.new(a: 1) },
        "Object#extend" => -> { Object.new.extend(Comparable) },
        "Module#public_constant" => -> { Churn.public_constant(:VALUE) }
      }.freeze

      # The request, clean or after one of CALLS (the clean one calls an empty lambda instead, so
      # every variant pays the same indirection).
      VARIANTS = {"clean" => -> {}}.merge(CALLS).transform_values do |call|
        lambda do
          call.call
          Shapes.request
        end
      end.freeze

      THREADS = [1, 10].freeze

      # Worker threads that serve requests, as a threaded app server does under a steady load:
      # #serve splits n requests into one batch per thread and returns when all are done, so
      # the threads hand the GVL to each other as a busy server's do (on its time slice), not
      # once per request through a queue.
      class Pool
        def initialize(threads)
          @jobs = Queue.new
          @done = Queue.new
          @threads = Array.new(threads) do
            Thread.new do
              while (job = @jobs.pop)
                request, count = job
                count.times { request.call }
                @done << true
              end
            end
          end
        end

        def serve(request, n)
          batch, extra = n.divmod(@threads.size)
          @threads.each_index { |i| @jobs << [request, batch + ((i < extra) ? 1 : 0)] }
          @threads.size.times { @done.pop }
        end

        def close
          @jobs.close
          @threads.each(&:join)
        end
      end

      module_function

      # {threads => {variant => [requests/s of each round]}}: rounds short ips runs, the variants
      # in a rotated order each round. Figures are paired by round (PairedRatio), so a spell of
      # load from the other processes on a shared machine weighs on a variant and the clean
      # request it is compared with alike.
      def run(time:, warmup:, rounds:)
        THREADS.to_h do |threads|
          pool = Pool.new(threads)
          by_round = Hash.new { |hash, name| hash[name] = [] }
          rounds.times do |round|
            report = Benchmark.ips(quiet: true) do |x|
              x.config(time: time, warmup: warmup)
              VARIANTS.to_a.rotate(round).each { |name, request| x.report(name) { |n| pool.serve(request, n) } }
            end
            report.entries.each { |entry| by_round[entry.label] << entry.ips }
          end
          pool.close
          [threads, by_round]
        end
      end

      # {call => µs} for each of CALLS alone, on this thread, the median of rounds.
      def call_costs(time:, warmup:, rounds:)
        by_round = Hash.new { |hash, name| hash[name] = [] }
        rounds.times do |round|
          report = Benchmark.ips(quiet: true) do |x|
            x.config(time: time, warmup: warmup)
            CALLS.to_a.rotate(round).each { |name, call| x.report(name) { |n| n.times { call.call } } }
          end
          report.entries.each { |entry| by_round[entry.label] << 1e6 / entry.ips }
        end
        by_round.transform_values { |costs| PairedRatio.median(costs) }
      end

      # {variant => {counter => growth}} for one request of each, after a warm-up request.
      def counters_moved
        VARIANTS.transform_values do |request|
          request.call
          before = VMWatch::Counters.read
          request.call
          VMWatch::Counters.delta(before, VMWatch::Counters.read)
        end
      end

      def table(rates, costs, moved)
        header = ["request"] + THREADS.flat_map { |t| ["#{t} thread#{"s" if t > 1} req/s", "slowdown"] } +
          ["µs added", "call alone µs", "counters moved per request"]
        rows = VARIANTS.keys.map do |name|
          cells = THREADS.flat_map { |threads| [PairedRatio.median(rates[threads][name]).round.to_s, slowdown(rates[threads], name)] }
          counters = moved[name].map { |key, growth| "#{key} +#{growth}" }.join(", ")
          [name, *cells, added(rates[THREADS.first], name), costs[name] ? format("%.1f", costs[name]) : "-",
            counters.empty? ? "none" : counters]
        end
        TextTable.render(header, rows)
      end

      # How much slower than the clean request, the median over rounds of each round's ratio.
      def slowdown(by_round, name)
        return "-" if name == "clean"

        format("%.1f%%", (1 - PairedRatio.median(by_round[name].zip(by_round["clean"]).map { |v, c| v / c })) * 100)
      end

      # The µs the call adds to one request, the median over rounds.
      def added(by_round, name)
        return "-" if name == "clean"

        format("%.1f", PairedRatio.median(by_round[name].zip(by_round["clean"]).map { |v, c| 1e6 / v - 1e6 / c }))
      end

      def main(argv)
        quick = argv.include?("--quick")
        rounds = quick ? 1 : 5
        puts "#{RUBY_DESCRIPTION}; #{Shapes::ALL.size} shapes, #{Shapes::ALL.size * 3} calls per request; " \
          "medians of #{rounds} paired round(s)"
        moved = counters_moved
        rates = run(time: 1, warmup: 0.5, rounds: rounds)
        puts table(rates, call_costs(time: 1, warmup: 0.5, rounds: rounds), moved)
      end
    end
  end
end

Strata::Bench::VMCache.main(ARGV) if $PROGRAM_NAME == __FILE__
