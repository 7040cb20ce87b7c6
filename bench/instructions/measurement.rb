# frozen_string_literal: true

require "fileutils"
require "open3"
require "rbconfig"

module Strata
  module Bench
    module Instructions
      # One count of the operations under callgrind: builds the client-request helper
      # (callgrind.c) for this Ruby, runs probe.rb with the operations, and reads the instructions
      # it counted for each from its dumps. Instructions per call = (count of 2N calls - count of N
      # calls) / N: what the loop's entry, the dump's own cost and the toggling add is the same
      # in both and cancels.
      class Measurement
        # Calls counted per operation (N; 2N more follow). The loop adds nothing but its own
        # ~30 instructions per call, so more calls buy no precision: the counts are exact.
        ITERATIONS = 500

        HELPER_SOURCE = File.expand_path("callgrind.c", __dir__)
        PROBE = File.expand_path("probe.rb", __dir__)

        # The probe failed, or counted no operation.
        class Failed < StandardError; end

        # The instructions per call of one operation, and the dump of its 2N calls (a profile
        # callgrind_annotate reads).
        Result = Struct.new(:name, :per_call, :profile)

        # dir: where the helper is built and the dumps are written (tmp/instructions).
        def initialize(dir, iterations: ITERATIONS)
          @dir = dir
          @iterations = iterations
        end

        # names: the operations to count. Returns {name => Result}. The operations run one after
        # the other in one process (one Ruby boot under valgrind, not one per operation); each
        # call of run writes its dumps into a fresh directory run-K under dir (run 1 removes
        # every earlier run's, so the directory holds this count's profiles only).
        def run(names, run_index)
          out = File.join(@dir, "run-#{run_index}")
          FileUtils.rm_rf((run_index == 1) ? Dir.glob(File.join(@dir, "run-*")) : out)
          FileUtils.mkdir_p(out)
          output, status = Open3.capture2e(*command(out, names))
          raise Failed, "probe failed (#{status}):\n#{output}" unless status.success?

          dumps = Dir.glob(File.join(out, "callgrind.out.*")).to_h { |path| dump(path) }
          names.to_h { |name| [name, result(name, dumps, out)] }
        end

        private

        # The helper's shared object, rebuilt when its source is newer.
        def helper
          path = File.join(@dir, "callgrind.#{RbConfig::CONFIG["DLEXT"]}")
          return path if File.exist?(path) && File.mtime(path) >= File.mtime(HELPER_SOURCE)

          FileUtils.mkdir_p(@dir)
          config = RbConfig::CONFIG
          build = [*config["LDSHARED"].split, *config["CCDLFLAGS"].split, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
            "-isystem", config["rubyhdrdir"], "-isystem", config["rubyarchhdrdir"], HELPER_SOURCE, "-o", path]
          output, status = Open3.capture2e(*build)
          raise Failed, "building #{HELPER_SOURCE} failed:\n#{output}" unless status.success?

          path
        end

        # Counting starts and stops where probe.rb asks (--instr-atstart=no). _int_malloc, glibc's
        # search of its free lists for a chunk, is left out (--toggle-collect turns collection off
        # on its entry and on at its exit): its cost depends on what the process freed before the
        # count, not on the operation. With GC off nothing is freed in the loop, so every
        # allocation goes there, and l1_get counted from 1,527 to 1,836 instructions depending on
        # what ran before it; without it, the same count within 0.2%. malloc's own entry and Ruby's
        # allocation stay in the count, so an operation that allocates more still costs more.
        def command(out, names)
          ["valgrind", "--tool=callgrind", "-q", "--instr-atstart=no", "--toggle-collect=_int_malloc",
            # After --toggle-collect, which otherwise turns collection off at the start.
            "--collect-atstart=yes",
            "--callgrind-out-file=#{out}/callgrind.out", RbConfig.ruby, PROBE, helper, @iterations.to_s, *names]
        end

        def result(name, dumps, out)
          small = dumps["#{name} #{@iterations}"]
          large = dumps["#{name} #{2 * @iterations}"]
          raise Failed, "no dump for #{name} in #{out}" unless small && large

          Result.new(name, (large[:total] - small[:total]).fdiv(@iterations), large[:path])
        end

        # [label, {total:, path:}] from a dump's header: its client-request label and total Ir.
        def dump(path)
          label = total = nil
          File.foreach(path) do |line|
            label = line.split("Client Request: ", 2).last.chomp if line.start_with?("desc: Trigger: Client Request: ")
            total = Integer(line.split.last) if line.start_with?("totals:")
          end
          [label, {total: total, path: path}]
        end
      end
    end
  end
end
