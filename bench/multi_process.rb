# frozen_string_literal: true

require "etc"
require_relative "cases"
require_relative "format"
require_relative "host_load"
require_relative "stores"
require_relative "workload"

module Strata
  module Bench
    # The hit_30b workload against one strata_l1 table from 1 forked process, then from 2 at once.
    # Each child warms up, waits for a common start, runs for a fixed time counting operations, and
    # sends "ops seconds" back through a pipe. Readers take no lock (ext/strata/table.h), so two
    # processes should come close to twice the throughput of one, given two idle cores.
    class MultiProcess
      DEFAULTS = {
        seconds: 2.0,
        warmup: 0.3,
        # Operations between clock reads in a child: long enough that the clock is noise.
        batch: 1000,
        # The issue's target for two processes over one; reported, never asserted.
        target: 1.8
      }.freeze

      def initialize(env, **options)
        @env = env
        @options = DEFAULTS.merge(options.slice(*DEFAULTS.keys))
      end

      def run
        # The children inherit the parent's mapping through fork, as a preforking app server's do.
        idle = HostLoad.idle_cpus
        store = Stores::StrataL1.new(@env)
        workload = Workload.new(Cases.find("hit_30b"), store, prefix: "sb:#{@env.nonce}:mp").prepare
        one = measure(workload, 1)
        two = measure(workload, 2)
        {processes_1_ops_per_s: one.sum, processes_2_ops_per_s: two.sum, per_process_2: two,
         scaling: one.sum.positive? ? two.sum / one.sum : nil, target: @options[:target],
         seconds: @options[:seconds], cpus: Etc.nprocessors, idle_cpus_before: idle}
      ensure
        store&.close
      end

      def self.lines(report)
        scaling = report[:scaling]
        verdict = if scaling.nil? then "not measured"
        elsif scaling >= report[:target] then "meets"
        else "below"
        end
        [
          "two processes: hit_30b on one strata_l1 table, #{report[:seconds]} s per run, #{report[:cpus]} CPUs, " \
          "#{report[:idle_cpus_before] || "unknown"} idle before",
          "  1 process:   #{Format.ips(report[:processes_1_ops_per_s])} ops/s",
          "  2 processes: #{Format.ips(report[:processes_2_ops_per_s])} ops/s " \
          "(#{report[:per_process_2].map { |ops| Format.ips(ops) }.join(" + ")})",
          "  scaling #{scaling ? format("%.2fx", scaling) : "-"}, #{verdict} the #{report[:target]}x target" \
          "#{" (fewer than 2 CPUs: cannot scale)" if report[:cpus] < 2}"
        ]
      end

      private

      # Ops per second of each of n children running together.
      def measure(workload, n)
        pipes = {go: IO.pipe, ready: IO.pipe, result: IO.pipe}
        pids = []
        n.times { pids << fork { child(workload, pipes) } }
        pipes[:go][0].close
        pipes[:ready][1].close
        pipes[:result][1].close
        # A barrier: every child has warmed up (or died, which ends the read early) before any starts.
        # Closing the start pipe then wakes them all at once: each sees end-of-file.
        pipes[:ready][0].read(n)
        pipes[:go][1].close
        lines = pipes[:result][0].read.lines
        Process.wait(pids.shift) until pids.empty?
        parse(lines, n)
      ensure
        pipes&.values&.flatten&.each { |io| io.close unless io.closed? }
        reap(pids || [])
      end

      # Runs in the child. exit! on every path, so no at_exit handler or ensure of the parent's
      # stack (which removes the scratch directory) runs here.
      def child(workload, pipes)
        go, ready, result = pipes.values_at(:go, :ready, :result)
        [go[1], ready[0], result[0]].each(&:close)
        # A full GC writes to every inherited heap page once, so copy-on-write faults happen here
        # and not in the timed run.
        GC.start
        timed(workload, @options[:warmup])
        ready[1].write("r")
        ready[1].close
        go[0].read
        ops, seconds = timed(workload, @options[:seconds])
        # One short line is below PIPE_BUF, so the lines of several children never interleave.
        result[1].write("#{ops} #{seconds}\n")
        exit!(0)
      rescue => e
        result[1].write("error #{e.class}: #{e.message.lines.first&.strip}\n")
        exit!(1)
      ensure
        exit!(1)
      end

      # Runs batches until `seconds` have passed; at most seconds / (batch time) + 1 batches.
      def timed(workload, seconds)
        start = now
        deadline = start + seconds
        ops = 0
        loop do
          workload.run(@options[:batch])
          ops += @options[:batch]
          break if now >= deadline
        end
        [ops, now - start]
      end

      def parse(lines, n)
        errors = lines.select { |line| line.start_with?("error") }
        raise "child failed: #{errors.first.strip}" unless errors.empty?
        raise "#{lines.size} of #{n} children reported" unless lines.size == n

        lines.map do |line|
          ops, seconds = line.split
          Integer(ops) / Float(seconds)
        end
      end

      # Children still running after a failure in the parent are killed and waited for.
      def reap(pids)
        pids.each do |pid|
          Process.kill(:KILL, pid)
        rescue Errno::ESRCH
          nil
        ensure
          begin
            Process.wait(pid)
          rescue Errno::ECHILD
            nil
          end
        end
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end
    end
  end
end
