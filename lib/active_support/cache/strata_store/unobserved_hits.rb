# frozen_string_literal: true

require "active_support/cache"
require "active_support/notifications"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # The hit path, when nobody is watching. On a live hit the base read and fetch do nothing
      # observable besides instrumenting: two event payloads (cache_read, then cache_fetch_hit) that
      # cost more than the L1 lookup itself. When no one subscribes to those events and no debug
      # logger would print them, this layer returns the hit directly. Everything else (a miss, an
      # expired or mismatched entry, force, an error) goes to the base path unchanged, which reads
      # again and instruments, expires and reports as it always does.
      module UnobservedHits
        READ_EVENT = "cache_read.active_support"
        FETCH_HIT_EVENT = "cache_fetch_hit.active_support"

        def fetch(name, options = nil, &block)
          value = block ? unobserved_hit(name, options, FETCH_HIT_EVENT) : Codec::MISS
          Codec::MISS.equal?(value) ? super : value
        end

        def read(name, options = nil)
          value = unobserved_hit(name, options, READ_EVENT)
          Codec::MISS.equal?(value) ? super : value
        end

        private

        # The live value for name, or Codec::MISS when the base path must run.
        def unobserved_hit(name, options, event)
          return Codec::MISS if observed?(event)

          options = options ? merged_options(options) : @options
          return Codec::MISS if options[:force]

          bytes = read_bytes(normalize_key(name, options), nil, nil)
          return Codec::MISS unless bytes

          @codec.live_value(bytes, options[:raw], normalize_version(name, options))
        rescue Strata::Error
          Codec::MISS # the base path reads again and reports the failure once
        end

        # Every fetch and read emits cache_read; a fetch hit also emits cache_fetch_hit.
        def observed?(event)
          return true if logger&.debug?

          notifier = ActiveSupport::Notifications.notifier
          notifier.listening?(READ_EVENT) || (event != READ_EVENT && notifier.listening?(event))
        end
      end
    end
  end
end
