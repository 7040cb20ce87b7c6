# frozen_string_literal: true

module Strata
  module Bench
    module Stores
      # For the StrataStore adapters. The store turns a failed tier into a miss or a false write and
      # only counts it, so a cell whose SQLite or memcached tier failed on every call would still
      # time, and time well. #check makes such a cell an error instead. Needs @store.
      module TierFailures
        def check
          failures = @store.stats[:failures]
          return if failures.empty?

          raise "tier failures: #{failures.map { |error, count| "#{count} x #{error}" }.join(", ")}"
        end
      end
    end
  end
end
