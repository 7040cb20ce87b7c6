# frozen_string_literal: true

require "active_support/fork_tracker"

module Strata
  # Counts forks this process descends from, so per-request code can notice it runs in a forked
  # child by comparing two Integers. Process.pid is a getpid(2) syscall on every call (glibc no
  # longer caches it), too dear for every memcached call. ActiveSupport's ForkTracker
  # hooks Process._fork, which every Ruby-level fork goes through.
  module ForkGeneration
    @current = 0

    class << self
      attr_reader :current

      def forked!
        @current += 1
      end
    end

    ActiveSupport::ForkTracker.after_fork { ForkGeneration.forked! }
  end
end
