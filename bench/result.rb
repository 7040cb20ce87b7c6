# frozen_string_literal: true

module Strata
  module Bench
    # One measured cell: a store on a case. error is set (and ips nil) when the cell failed.
    # hit_pct is what the store really gave, expected_hit_pct what the case was built to give.
    # rounds is the ips of each round, in the order the Runner measured them (ips is their median).
    class Result
      # Percentage points a hit ratio may stray before the report flags the cell: eviction of a hot
      # key during a long miss run is noise; a store that loses keys is not.
      HIT_TOLERANCE = 1.0

      attr_reader :store, :case_name, :ips, :error_pct, :rounds, :hit_pct, :expected_hit_pct, :error

      def initialize(store:, case_name:, ips: nil, error_pct: nil, rounds: [], hit_pct: nil, expected_hit_pct: nil,
        error: nil)
        @store = store
        @case_name = case_name
        @ips = ips
        @error_pct = error_pct
        @rounds = rounds.freeze
        @hit_pct = hit_pct
        @expected_hit_pct = expected_hit_pct
        @error = error
      end

      def ok?
        error.nil?
      end

      def hit_mismatch?
        ok? && !expected_hit_pct.nil? && !hit_pct.nil? && (hit_pct - expected_hit_pct).abs > HIT_TOLERANCE
      end
    end
  end
end
