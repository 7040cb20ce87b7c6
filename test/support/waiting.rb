# frozen_string_literal: true

require "strata/clock"

module Strata
  # A bounded wait on a condition that time, another thread or another process brings about.
  module Waiting
    # Polls the block, every `every` seconds, until it is truthy or timeout seconds pass; returns
    # its last value.
    def wait_until(timeout = 5, every: 0.01)
      deadline = Strata::Clock.monotonic + timeout
      loop do
        result = yield
        return result if result || Strata::Clock.monotonic > deadline

        sleep every
      end
    end
  end
end
