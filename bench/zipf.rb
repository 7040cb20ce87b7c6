# frozen_string_literal: true

module Strata
  module Bench
    # A seeded Zipf sampler over ranks 0...n: rank k is drawn with probability proportional to
    # 1 / (k + 1)**skew. Web cache traces fit skews of about 0.6 to 1.0.
    class Zipf
      def initialize(n:, skew:, seed:)
        total = 0.0
        # Unnormalised running sums; a draw scales a uniform number by the total instead.
        @cumulative = Array.new(n) { |k| total += 1.0 / (k + 1)**skew }
        @total = total
        @random = Random.new(seed)
      end

      # One rank; a binary search over n sums, so O(log n).
      def sample
        target = @random.rand * @total
        @cumulative.bsearch_index { |sum| sum >= target } || @cumulative.size - 1
      end

      def trace(length)
        Array.new(length) { sample }
      end
    end
  end
end
