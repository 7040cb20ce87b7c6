# frozen_string_literal: true

module Strata
  module CLI
    # How long ago the L1 table's segments in use began to be written (table.h: a segment's
    # start), in seconds, from SharedMemory#segment_starts: over the whole table the oldest,
    # median and newest, and each shard's oldest. A segment is the unit CLOCK evicts, so the
    # oldest start is about how far back the table still holds what was written and not read
    # since (items read since are carried into younger segments). Starts the table could not
    # vouch for (zero in a file from an earlier build, a clock set back) count as unknown.
    class SegmentAges
      def initialize(segment_starts)
        @now_ms = segment_starts[:now_ms]
        @shards = segment_starts[:shards]
      end

      # {in_use:, unknown:, oldest:, median:, newest:, shard_oldest: [...]}; an age is nil where
      # no start is known.
      def to_h
        starts = @shards.flatten.compact.sort
        {in_use: @shards.sum(&:size), unknown: @shards.sum { |shard| shard.count(&:nil?) },
         oldest: age(starts.first), median: age(median(starts)), newest: age(starts.last),
         shard_oldest: @shards.map { |shard| age(shard.compact.min) }}
      end

      private

      # Seconds, to the millisecond; nil for nil.
      def age(start_ms)
        start_ms && (@now_ms - start_ms) / 1000.0
      end

      def median(sorted)
        return nil if sorted.empty?

        middle = sorted.size / 2
        sorted.size.odd? ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
      end
    end
  end
end
