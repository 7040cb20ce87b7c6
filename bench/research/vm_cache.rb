# frozen_string_literal: true

# What one VM-cache-invalidating call per request costs on this Ruby, after "Ruby global method
# cache invalidation impact on a single and multithreaded applications": the same simulated
# request served by 1 and by 10 threads, clean and with one invalidating call in it.
#
#   bundle exec ruby bench/research/vm_cache.rb [--quick]    (about 80 s; --quick: one round, 10 s)
#
# Not part of bin/bench. Prints requests/s, the CPU time per request and the slowdown against
# the clean request on the same number of threads; what each call costs alone (what it adds to
# a request beyond that is what the invalidated caches cost); and which RubyVM.stat counters
# each call moves.

require "benchmark/ips"
require "ostruct"
require_relative "../paired_ratio"
require_relative "../text_table"

lib = File.expand_path("../../lib", __dir__)
$LOAD_PATH.unshift(lib) unless $LOAD_PATH.include?(lib)
require "strata/vm_watch"

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

      # Per round, for each job: requests/s (benchmark-ips, wall clock) and the process's CPU
      # time per request over the same calls. On a shared machine the wall clock also counts the
      # time other processes held the cores; CPU time mostly does not, so the slowdowns are
      # taken from it.
      Figures = Struct.new(:ips, :cpu_us)

      module_function

      # {name => Figures of per-round Arrays}. jobs: {name => callable(n) doing n requests}. Each
      # round gives every job a short ips run of its own, after a full GC (so one job's garbage is
      # not collected on another's time), in an order rotated round by round; figures are
      # compared round by round (PairedRatio), so a spell of load weighs on a variant and the
      # clean request it is compared with alike.
      def measure(jobs, time:, warmup:, rounds:)
        figures = jobs.keys.to_h { |name| [name, Figures.new([], [])] }
        rounds.times do |round|
          jobs.to_a.rotate(round).each do |name, job|
            GC.start
            cpu = 0.0
            calls = 0
            report = Benchmark.ips(quiet: true) do |x|
              x.config(time: time, warmup: warmup)
              x.report(name) do |n|
                started = cpu_now
                job.call(n)
                cpu += cpu_now - started
                calls += n
              end
            end
            figures[name].ips << report.entries.first.ips
            figures[name].cpu_us << cpu / calls * 1e6
          end
        end
        figures
      end

      def cpu_now
        Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
      end

      # {threads => {variant => Figures}}: each variant served by a pool of that many threads.
      def run(**options)
        THREADS.to_h do |threads|
          pool = Pool.new(threads)
          [threads, measure(VARIANTS.transform_values { |request| ->(n) { pool.serve(request, n) } }, **options)]
        ensure
          pool&.close
        end
      end

      # {call => CPU µs} for each of CALLS alone, on this thread.
      def call_costs(**options)
        figures = measure(CALLS.transform_values { |call| ->(n) { n.times { call.call } } }, **options)
        figures.transform_values { |f| PairedRatio.median(f.cpu_us) }
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

      def table(results, costs, moved)
        header = ["request"] + THREADS.flat_map { |t| ["#{t} thread#{"s" if t > 1} req/s", "CPU µs/req", "slowdown"] } +
          ["call alone, CPU µs", "counters moved per request"]
        rows = VARIANTS.keys.map do |name|
          cells = THREADS.flat_map do |threads|
            figures = results[threads][name]
            clean = results[threads]["clean"].cpu_us
            [PairedRatio.median(figures.ips).round.to_s, format("%.1f", PairedRatio.median(figures.cpu_us)),
              (name == "clean") ? "-" : format("%.1f%%", slowdown(clean, figures.cpu_us))]
          end
          counters = moved[name].map { |key, growth| "#{key} +#{growth}" }.join(", ")
          [name, *cells, costs[name] ? format("%.1f", costs[name]) : "-", counters.empty? ? "none" : counters]
        end
        TextTable.render(header, rows)
      end

      # The throughput lost against the clean request, in %: 1 - clean/variant CPU time per
      # request, the median of the rounds' ratios.
      def slowdown(clean_cpu_us, cpu_us)
        (1 - PairedRatio.median(clean_cpu_us.zip(cpu_us).map { |c, v| c / v })) * 100
      end

      def main(argv)
        quick = argv.include?("--quick")
        rounds = quick ? 1 : 9
        puts "#{RUBY_DESCRIPTION}; #{Shapes::ALL.size} shapes, #{Shapes::ALL.size * 3} calls per request; " \
          "medians of #{rounds} paired round(s)"
        moved = counters_moved
        options = {time: 0.5, warmup: 0.2, rounds: rounds}
        puts table(run(**options), call_costs(**options), moved)
      end
    end
  end
end

Strata::Bench::VMCache.main(ARGV) if $PROGRAM_NAME == __FILE__
