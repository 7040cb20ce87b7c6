# frozen_string_literal: true

module Strata
  module TestSupport
    # Forking and reaping for tests that run the table in several processes. Every wait has a
    # deadline, and a child never runs the parent's at_exit hooks (minitest would run again in it).
    module ChildProcesses
      # Exit code of a child whose block raised.
      RAISED = 2

      module_function

      # Forks a child that runs the block and exits 0 if it returned truthy, 1 if falsy, RAISED if it
      # raised (the error goes to stderr). Returns the pid. report_after: seconds after which a
      # child still running writes where each of its threads is (#report_where) to the file
      # report_to, for a parent that kills it at a deadline a little later.
      def fork_child(report_after: nil, report_to: nil)
        fork do
          report_where(report_after, report_to) if report_after
          code = begin
            yield ? 0 : 1
          rescue Exception => e # rubocop:disable Lint/RescueException -- whatever happens, exit! below
            warn "child #{Process.pid}: #{e.class}: #{e.message}\n  #{e.backtrace&.first(5)&.join("\n  ")}"
            RAISED
          end
          exit!(code)
        end
      end

      # A thread that, once seconds have passed, writes to path each Ruby thread's backtrace and
      # each kernel thread's name and wait channel (/proc/self/task): which of the two tells
      # where a hung child waits depends on whether it holds Ruby's lock. A timer, not a wait on
      # the child's work: the child normally exits (and the thread with it) long before.
      def report_where(seconds, path)
        Thread.new do
          sleep(seconds)
          threads = (Thread.list - [Thread.current]).map do |thread|
            "  #{thread.name || thread.inspect}\n    #{(thread.backtrace || []).first(15).join("\n    ")}"
          end
          tasks = Dir["/proc/self/task/*"].map do |task|
            "  #{File.basename(task)} #{File.read("#{task}/comm").strip}: #{File.read("#{task}/wchan")}"
          rescue SystemCallError
            nil
          end
          File.write(path, "child #{Process.pid} still running after #{seconds}s. Its Ruby threads:\n#{threads.join("\n")}\n" \
            "Its kernel threads (id name: wait channel):\n#{tasks.compact.join("\n")}\n")
        end
      end

      # Polls with WNOHANG until pid is reaped or timeout seconds pass. Its Process::Status, or nil
      # if it is still running (or was not our child).
      def reap(pid, timeout)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
        loop do
          reaped, status = Process.waitpid2(pid, Process::WNOHANG)
          return status if reaped
          return nil if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          sleep 0.001
        end
      rescue Errno::ECHILD
        nil
      end

      # SIGKILL (a stopped child dies too) and reap. The status, or nil if it was already reaped.
      def kill_and_reap(pid, timeout)
        begin
          Process.kill(:KILL, pid)
        rescue Errno::ESRCH
          nil
        end
        ChildProcesses.reap(pid, timeout)
      end
    end

    # For a test that keeps its unreaped children in @pids (its teardown kills what is left) and sets
    # DEADLINE. A pid leaves @pids once reaped, so teardown never signals a pid the kernel reused.
    module TrackedChildren
      include ChildProcesses

      # Forks a child as ChildProcesses#fork_child does and tracks it.
      def fork_tracked(&)
        pid = fork_child(&)
        @pids << pid
        pid
      end

      # Its Process::Status, or nil if it did not exit within DEADLINE (it stays in @pids).
      def reap_child(pid)
        status = reap(pid, self.class::DEADLINE)
        @pids.delete(pid) if status
        status
      end

      # SIGKILLs and reaps every child still tracked.
      def kill_tracked_children
        @pids.each { |pid| kill_and_reap(pid, self.class::DEADLINE) }
      end
    end
  end
end
