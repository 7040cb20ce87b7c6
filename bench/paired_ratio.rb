# frozen_string_literal: true

module Strata
  module Bench
    # How many times faster one cell of a case ran than another, paired by round. The Runner
    # measures the cells of a case in alternating rounds, so the two cells' rounds of one number
    # ran back to back, through the same spell of the shared machine; each such pair gives one
    # ratio, and the figure is their median. The ratio of the two cells' medians can instead pair
    # one cell's fast round with the other's slow one.
    module PairedRatio
      module_function

      # top, bottom: Results of one case, both ok, bottom's ips positive. The ratio of their
      # medians when their rounds don't pair up (not as many, or one without ips).
      def of(top, bottom)
        return top.ips / bottom.ips unless pairs?(top.rounds, bottom.rounds)

        median(top.rounds.zip(bottom.rounds).map { |a, b| a / b })
      end

      def pairs?(top_rounds, bottom_rounds)
        !top_rounds.empty? && top_rounds.size == bottom_rounds.size && bottom_rounds.all?(&:positive?)
      end

      def median(values)
        sorted = values.sort
        mid = sorted.size / 2
        sorted.size.odd? ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2.0
      end
    end
  end
end
