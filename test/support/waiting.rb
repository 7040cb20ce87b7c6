# frozen_string_literal: true

module Strata
  # A bounded wait on a condition, for the few tests that depend on the wall clock (a tier's TTL).
  module Waiting
    # Polls the block, every `every` seconds, until it is truthy or timeout seconds pass; returns
    # its last value.
    def wait_until(timeout = 5, every: 0.01)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      loop do
        result = yield
        return result if result || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

        sleep every
      end
    end
  end
end
