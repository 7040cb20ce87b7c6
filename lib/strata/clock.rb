# frozen_string_literal: true

require "strata/strata_ext" # Clock.monotonic_us

module Strata
  # Seconds on the monotonic clock, for deadlines and retry delays: it never jumps when the wall
  # clock is set. Clock.monotonic_us, Integer microseconds on the same clock for the durations
  # Strata::Counters adds up, is in C (ext/strata/shared_memory_ext.c): a quarter of what
  # Process.clock_gettime(..., :microsecond) costs a call.
  module Clock
    def self.monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
