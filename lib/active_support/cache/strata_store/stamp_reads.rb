# frozen_string_literal: true

require "active_support/cache"
require "strata/entry"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # The stack's on_stamps (Strata::Stack): a current stamped entry (bytes) was read under key.
      # The computation under way in this fiber, if any, depends on its stamps too, and the
      # read-through of key keeps them (Fill#read_stamps). A read of one of the computation's own
      # keys (fetch_multi's hits) is not its dependency, but the computation around it, if any,
      # used the value.
      #
      # Every tagged hit comes here, mostly outside any fetch block: the stamps are unpacked only
      # when a computation or fill takes them, and this is an object with a plain #call, which
      # costs a hit less than a Method's or a lambda's.
      class StampReads
        def call(key, bytes)
          fiber = Thread.current
          capture = fiber[CAPTURE]
          fill = fiber[FILL]
          fill = nil unless fill && fill.key == key
          return unless capture || fill

          words = Strata::Entry.stamp_words(bytes)
          if capture
            capture.for?(key) ? capture.outer&.add(words) : capture.add(words)
          end
          fill.read_stamps = words if fill
        end
      end
    end
  end
end
