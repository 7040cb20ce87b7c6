# frozen_string_literal: true

require "digest"
require "timeout"
require "strata"
require "support/child_processes"

module Strata
  module TestSupport
    # The L1 table's crash loop (ext/strata/table.h, "crashes"): fork writers that hammer a small key
    # set, kill -9 them at random points, then check from the parent that nothing hangs and nothing
    # reads wrong.
    #
    # Values validate themselves: each encodes its key, its writer, a counter and random padding, then a
    # digest of all of that. Any process can check any read without shared state, so a torn or misfiled
    # value is caught wherever it is seen. Counter keys only ever hold ASCII decimals.
    #
    # Used by test/tiers/shared_memory_crash_test.rb (a few rounds) and test/torture/crash_loop.rb (many).
    # Every wait has a deadline; Timeout wraps a whole round only as a last resort.
    class CrashLoop
      DEFAULTS = {
        writers: 3,             # processes forked per round
        value_keys: 24,         # keys holding self-validating values
        counter_keys: 4,        # keys that only see incr and decr
        max_pad: 3000,          # random padding per value, in bytes, so values span many sizes
        max_kill_delay_us: 20_000, # each writer is killed after a random delay up to this
        ready_timeout: 10.0,    # seconds a writer has to finish its first operations
        reap_timeout: 5.0,      # seconds a SIGKILLed writer has to be reaped
        write_timeout: 2.0,     # seconds the parent retries a write that got false (lock busy)
        round_timeout: 30.0,    # last resort around a whole round
        lock_timeout: 0.05      # lock_timeout of every table opened here
      }.freeze

      # Exit code of a writer that read a value that fails validation.
      BAD_READ_EXIT = 3

      DIGEST_LENGTH = 16

      # What one round saw. violations is empty when the round passed.
      Round = Struct.new(:violations, :killed, :exited, keyword_init: true)

      attr_reader :value_keys, :counter_keys

      # table_options: the keywords for Strata::Tiers::SharedMemory.new (path:, size:, ...).
      def initialize(table_options, **options)
        @table_options = {lock_timeout: DEFAULTS[:lock_timeout]}.merge(table_options)
        @options = DEFAULTS.merge(options)
        @value_keys = Array.new(@options[:value_keys]) { |i| "crash:v#{i}" }
        @counter_keys = Array.new(@options[:counter_keys]) { |i| "crash:c#{i}" }
        @table = open_table
      end

      def open_table
        Strata::Tiers::SharedMemory.new(**@table_options)
      end

      # The parent's handle. Writers inherit it across fork, or open their own.
      attr_reader :table

      def close
        @table.close
      end

      # Encodes a value for key that validate accepts.
      def self.encode(key, writer, counter, padding)
        body = "#{key}|#{writer}|#{counter}|".b + padding.b
        body + "|" + Digest::SHA256.hexdigest(body)[0, DIGEST_LENGTH]
      end

      # True if bytes is a value that encode produced for key.
      def self.valid?(key, bytes)
        body, sep, digest = bytes.b.rpartition("|")
        !sep.empty? && body.start_with?("#{key}|".b) &&
          digest == Digest::SHA256.hexdigest(body)[0, DIGEST_LENGTH]
      end

      # True if bytes is a counter as the table stores it: ASCII decimal digits below 2**64.
      def self.valid_counter?(bytes)
        bytes.match?(/\A\d{1,20}\z/) && bytes.to_i < 2**64
      end

      # Runs one round with its own seed. Never raises for a table failure: it returns it as a violation.
      def round(seed)
        rng = Random.new(seed)
        violations = []
        pids = []
        reports_r, reports_w = IO.pipe
        ready_r, ready_w = IO.pipe
        Timeout.timeout(@options[:round_timeout]) do
          @options[:writers].times do |writer|
            writer_seed = rng.rand(2**31)
            pids << fork_writer(writer, writer_seed, ready_w, reports_w, [reports_r, ready_r])
          end
          ready_w.close
          reports_w.close
          wait_ready(ready_r, pids.size, violations)
          killed, exited = kill_writers(pids, rng, violations)
          violations.concat(reports_r.read.lines.map(&:chomp))
          check_reads(violations)
          check_writes(seed, violations)
          Round.new(violations: violations, killed: killed, exited: exited)
        end
      rescue Timeout::Error
        violations << "round did not finish within #{@options[:round_timeout]}s (hang)"
        Round.new(violations: violations, killed: 0, exited: 0)
      rescue Strata::Error => e
        violations << "the parent's table raised #{e.class}: #{e.message}"
        Round.new(violations: violations, killed: 0, exited: 0)
      ensure
        reap_all(pids)
        [reports_r, reports_w, ready_r, ready_w].each { |io| io.close unless io.closed? }
      end

      private

      def monotonic
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end

      def fork_writer(writer, seed, ready_w, reports_w, parent_ends)
        fork do
          parent_ends.each(&:close)
          status = 0
          begin
            table = writer.even? ? @table : open_table
            write_loop(table, writer, seed, ready_w, reports_w)
          rescue Exception => e # rubocop:disable Lint/RescueException -- a child must never run the parent's at_exit hooks
            begin
              reports_w.write("writer #{writer}: #{e.class}: #{e.message}\n")
            rescue IOError, SystemCallError
              nil
            end
            status = 1
          end
          exit!(status)
        end
      end

      # Runs until killed. Signals ready after a random number of operations, so a writer that hangs
      # on a lock a dead writer left behind shows up as one that never became ready.
      def write_loop(table, writer, seed, ready_w, reports_w)
        rng = Random.new(seed)
        ready_after = rng.rand(1..50)
        ops = 0
        loop do
          write_once(table, writer, rng, ops += 1, reports_w)
          if ops == ready_after
            ready_w.write(".")
            ready_w.flush
          end
        end
      end

      # One random operation. A lock timeout (false, or RetryableError from incr and decr) is
      # allowed: another writer may be descheduled while it holds the lock.
      def write_once(table, writer, rng, counter, reports_w)
        key = @value_keys.sample(random: rng)
        case rng.rand(1000)
        when 0...550
          padding = rng.bytes(rng.rand(0..@options[:max_pad]))
          table.set(key, self.class.encode(key, writer, counter, padding), ttl: rng.rand(2).zero? ? nil : 3600)
        when 550...650
          table.delete(key)
        when 650...800
          table.incr(@counter_keys.sample(random: rng), rng.rand(1..5), initial: 0)
        when 800...850
          table.decr(@counter_keys.sample(random: rng), 1, initial: 0)
        when 850...998
          bytes = table.get(key)
          if bytes && !self.class.valid?(key, bytes)
            reports_w.write("writer #{writer} read an invalid value for #{key}: #{bytes[0, 60].inspect}\n")
            exit!(BAD_READ_EXIT)
          end
        else
          table.clear
        end
      rescue Strata::RetryableError
        nil
      end

      def wait_ready(ready_r, count, violations)
        deadline = monotonic + @options[:ready_timeout]
        seen = 0
        while seen < count
          left = deadline - monotonic
          if left <= 0
            violations << "only #{seen} of #{count} writers made progress within #{@options[:ready_timeout]}s (hang)"
            return
          end
          next unless IO.select([ready_r], nil, nil, left)
          chunk = ready_r.read_nonblock(64, exception: false)
          break if chunk.nil? # every writer exited; kill_writers reports why
          seen += chunk.bytesize if chunk.is_a?(String)
        end
      end

      # Kills each writer after its own random delay (the delay picks the crash point; it is not used to
      # wait for anything), reading and checking values while the writers run, then reaps them all
      # against a deadline.
      def kill_writers(pids, rng, violations)
        pids.each do |pid|
          read_while_writers_run(monotonic + rng.rand(0..@options[:max_kill_delay_us]) / 1_000_000.0, rng, violations)
          Process.kill(:KILL, pid)
        rescue Errno::ESRCH
          nil
        end
        killed = 0
        exited = 0
        pids.each do |pid|
          status = reap(pid, @options[:reap_timeout])
          if status.nil?
            violations << "writer #{pid} was not reaped within #{@options[:reap_timeout]}s after SIGKILL"
          elsif status.signaled? && status.termsig == Signal.list.fetch("KILL")
            killed += 1
          else
            exited += 1
            violations << "writer #{pid} exited on its own: #{status.inspect}"
          end
        end
        [killed, exited]
      end

      def reap(pid, timeout)
        ChildProcesses.reap(pid, timeout)
      end

      def reap_all(pids)
        pids.each { |pid| ChildProcesses.kill_and_reap(pid, @options[:reap_timeout]) }
      end

      # Lock-free reads racing live writers: each is a miss or a valid value. Runs until deadline
      # (at least one read).
      def read_while_writers_run(deadline, rng, violations)
        loop do
          key = @value_keys.sample(random: rng)
          bytes = @table.get(key)
          violations << "parent read an invalid value for #{key} during writes: #{bytes[0, 60].inspect}" if bytes && !self.class.valid?(key, bytes)
          break if monotonic >= deadline
        end
      end

      # Every read after the crashes is a miss or a valid value, and a multi-get agrees with single gets.
      def check_reads(violations)
        singles = {}
        @value_keys.each do |key|
          bytes = @table.get(key)
          next unless bytes
          singles[key] = bytes
          violations << "parent read an invalid value for #{key}: #{bytes[0, 60].inspect}" unless self.class.valid?(key, bytes)
        end
        @counter_keys.each do |key|
          bytes = @table.get(key)
          singles[key] = bytes if bytes
          violations << "parent read a non-decimal counter #{key}: #{bytes[0, 60].inspect}" if bytes && !self.class.valid_counter?(bytes)
        end
        multi = @table.get_multi(@value_keys + @counter_keys)
        differ = (multi.keys | singles.keys).reject { |key| multi[key] == singles[key] }
        violations << "get_multi disagrees with get on #{differ.first(5).inspect}" unless differ.empty?
        stray = @table.keys.map(&:b) - (@value_keys + @counter_keys).map(&:b)
        violations << "keys lists keys nobody wrote: #{stray.first(5).inspect}" unless stray.empty?
      end

      # Writes still work after the crashes: every key can be set and read back, every counter
      # incremented. A false (lock busy) is retried until write_timeout.
      def check_writes(seed, violations)
        @value_keys.each do |key|
          value = self.class.encode(key, "parent", seed, "")
          unless retry_until_true { @table.set(key, value) }
            violations << "set #{key} still failing #{@options[:write_timeout]}s after the writers died"
            next
          end
          got = @table.get(key)
          violations << "#{key} read back #{got.inspect} after set" unless got == value
        end
        @counter_keys.each do |key|
          before = @table.get(key)
          recoveries = @table.stats[:owner_died_recoveries]
          after = nil
          unless retry_until_true { after = @table.incr(key, 1, initial: 0) }
            violations << "incr #{key} still failing #{@options[:write_timeout]}s after the writers died"
            next
          end
          # The first writer into a shard whose lock holder was killed drops that shard (table.h):
          # a counter there starts again at initial, and only then.
          dropped = @table.stats[:owner_died_recoveries] > recoveries
          expected = (before && !dropped) ? before.to_i + 1 : [0, 1]
          violations << "incr #{key} from #{before.inspect} gave #{after.inspect}" unless Array(expected).include?(after)
        end
      end

      # Retries while the block gives false or raises RetryableError, until write_timeout.
      def retry_until_true
        deadline = monotonic + @options[:write_timeout]
        loop do
          begin
            return true if yield
          rescue Strata::RetryableError
            nil
          end
          return false if monotonic > deadline
          sleep 0.001
        end
      end
    end
  end
end
