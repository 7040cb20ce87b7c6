# frozen_string_literal: true

module Strata
  module Bench
    # The reports' forked children.
    module Children
      # Waits until deadline (monotonic seconds) for pid to exit, then kills it and waits. A
      # child already reaped is left alone.
      def self.reap(pid, deadline)
        until Process.waitpid(pid, Process::WNOHANG) # bound: until deadline
          next sleep(0.01) if Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline

          Process.kill(:KILL, pid)
          Process.waitpid(pid)
          break
        end
      rescue Errno::ECHILD
        nil
      end
    end
  end
end
