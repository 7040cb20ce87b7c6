# frozen_string_literal: true

require "active_support/cache"
require "strata/clock"
require "strata/counters"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # The multi-key reads' figures in the host's counters (Strata::Counters): each name found
      # a read_hit, each name whose block ran a fetch_miss and a fill. A read_multi's time is
      # its hits' (n calls that took that long, together); a fetch_multi's goes to its misses
      # when it had any (its hits are then counted, not timed). One-key reads are counted by
      # Fetch and UnobservedReads; writes and deletes where entries are written and deleted.
      module CountedMultiReads
        def read_multi(*names)
          started = Strata::Clock.monotonic_us
          found = super
          @counters.operations(Strata::Counters::READ_HIT, found.size, started)
          found
        end

        def fetch_multi(*names)
          return super unless block_given?

          started = Strata::Clock.monotonic_us
          missed = 0
          found = super do |*args|
            missed += 1
            counted_fill { yield(*args) }
          end
          if missed.zero?
            @counters.operations(Strata::Counters::READ_HIT, found.size, started)
          else
            @counters.add(Strata::Counters::READ_HIT, found.size - missed)
            @counters.operations(Strata::Counters::FETCH_MISS, missed, started)
          end
          found
        end
      end
    end
  end
end
