# frozen_string_literal: true

require "etc"

module Strata
  module Bench
    # How busy the host is with work other than ours. The bench shares its CPUs with whatever else
    # runs (builds, tests, other benches), and numbers taken on a busy host read low.
    module HostLoad
      # Seconds spent watching.
      SAMPLE = 0.2

      module_function

      # CPUs that sat idle over a short look, like "1.9" of 2, or nil where /proc/stat is missing.
      def idle_cpus
        before = cpu_times
        sleep SAMPLE
        after = cpu_times
        total = after.sum - before.sum
        # Fields 4 and 5 of the aggregate line: idle and iowait.
        idle = (after[3] + after[4]) - (before[3] + before[4])
        total.positive? ? (Etc.nprocessors * idle.to_f / total).round(1) : nil
      rescue SystemCallError
        nil
      end

      # user nice system idle iowait irq softirq steal ... in clock ticks since boot.
      def cpu_times
        File.foreach("/proc/stat").first.split.drop(1).map(&:to_i)
      end
    end
  end
end
