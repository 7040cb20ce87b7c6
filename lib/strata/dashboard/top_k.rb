# frozen_string_literal: true

module Strata
  class Dashboard
    # The heaviest names among many, in bounded memory (the space-saving algorithm of Metwally,
    # Agrawal and El Abbadi): at most +capacity+ names are counted; a new name arriving when all
    # places are taken replaces the lightest one and inherits its weight. A name's weight is
    # then at most its true weight plus the weight of the name it replaced, and every name whose
    # true weight exceeds the total / capacity is kept. Not thread-safe (Sampler locks).
    class TopK
      def initialize(capacity)
        raise ArgumentError, "capacity must be a positive Integer" unless capacity.is_a?(Integer) && capacity.positive?

        @capacity = capacity
        @entries = {} # name => [weight, count]
      end

      # Adds weight (and one occurrence) to name. O(capacity) when name replaces another.
      def add(name, weight = 1)
        entry = @entries[name]
        if entry
          entry[0] += weight
          entry[1] += 1
        elsif @entries.size < @capacity
          @entries[name] = [weight, 1]
        else
          lightest, (floor, _) = @entries.min_by { |_, (w, _)| w }
          @entries.delete(lightest)
          @entries[name] = [floor + weight, 1]
        end
      end

      # [[name, weight, count], ...], heaviest first, at most limit of them.
      def top(limit = @capacity)
        @entries.sort_by { |_, (weight, _)| -weight }.first(limit).map { |name, (weight, count)| [name, weight, count] }
      end

      def clear
        @entries.clear
      end
    end
  end
end
