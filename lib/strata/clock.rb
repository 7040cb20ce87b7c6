# frozen_string_literal: true

module Strata
  # Seconds on the monotonic clock, for deadlines and retry delays: it never jumps when the wall
  # clock is set.
  module Clock
    def self.monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
