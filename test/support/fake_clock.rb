# frozen_string_literal: true

module Strata
  module TestSupport
    # A clock the test moves by hand (set now), for code that takes a clock: callable, returning
    # seconds as a Float.
    class FakeClock
      attr_accessor :now

      def initialize(now = 100.0)
        @now = now
      end

      def call
        @now
      end
    end
  end
end
