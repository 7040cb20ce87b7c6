# frozen_string_literal: true

require "active_support/cache"
require "active_support/notifications"
require "strata/clock"
require "strata/counters"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # The hit path of read when nobody is watching. On a live hit the base read does nothing
      # observable besides instrumenting: an event payload (cache_read) that costs more than the
      # L1 lookup itself. When no one subscribes to it and no debug logger would print it, this
      # layer returns the hit directly (Fetch probes the same way, #host_hit). Everything else
      # (an expired or mismatched entry, an active local cache, an error) goes to the base path
      # unchanged, which instruments, expires and reports as it always does.
      module UnobservedReads
        READ_EVENT = "cache_read.active_support"
        # host_hit's answer for a soft-stale copy (Strata::Entry.soft_stale?): the base path
        # answers it, or the fetch's claim recomputes it.
        SOFT_STALE = Object.new.freeze

        # A read that finds a value is a read_hit (Strata::Counters), timed, except the hits
        # answered here from the host table (counted only, as in #fetch).
        def read(name, options = nil)
          return counted_read(Strata::Clock.monotonic_us) { super } if observed?(READ_EVENT) || local_cache

          options = options ? merged_options(options) : @options
          key = normalize_key(name, options)
          value = host_hit(key, options, normalize_version(name, options), false)
          return counted_read(Strata::Clock.monotonic_us) { super } if SOFT_STALE.equal?(value)
          if Codec::MISS.equal?(value)
            # L1 alone, and L1 holds nothing under key (read once more, as the base read would,
            # which counts the miss and drops a stale copy): nil without the base read's options
            # and payload. Anything there goes the base way.
            return nil if @stack.host_only? && !@engine.claim(key) && absent?(key)

            return counted_read(Strata::Clock.monotonic_us) { super }
          end

          @read_hits.count_read_hit
          value
        end

        private

        # The block's value, counted and timed as a hit unless it is nil (a miss, as far as a
        # read can tell).
        def counted_read(started)
          value = yield
          @read_hits._operation_since(Strata::Counters::READ_HIT, started) unless value.nil?
          value
        end

        # The live value under key in the host table, when that is the top tier; SOFT_STALE for a
        # soft-stale copy there; else Codec::MISS.
        # Lower tiers are left to one read further on. Not with an active local cache: it answers
        # first.
        # none_pending: as Codec#live_value's.
        # An entry holding a bare String comes back from the table as its value, decoded and its
        # stamps checked in C (Stack#get_host_plain), unless what a read's stamps are handed to (a
        # transaction's pending tags, a computation's dependencies) is waiting for them.
        def host_hit(key, options, version, none_pending)
          if @engine.idle? && (none_pending || !Strata::TransactionTags.current)
            return Codec::MISS unless (found = @stack.get_host_plain(key))
            return found if found.instance_of?(String)

            bytes = found.first
            none_pending = true
          else
            bytes = @engine.noted(key, @stack.get_host(key))
          end
          return Codec::MISS unless bytes
          return SOFT_STALE if Strata::Entry.soft_stale?(bytes)

          @codec.live_value(bytes, options[:raw], version, none_pending)
        rescue Strata::Error
          Codec::MISS # the base path reads again and reports the failure once
        end

        # Whether the stack holds nothing under key; false when the read fails (the base path
        # reads again and reports it).
        def absent?(key)
          @stack.get(key).nil?
        rescue Strata::Error
          false
        end

        # Every fetch and read emits cache_read; a fetch hit also emits cache_fetch_hit, a cold
        # fetch cache_generate and cache_write.
        def observed?(event)
          return true if logger&.debug?

          notifier = ActiveSupport::Notifications.notifier
          notifier.listening?(READ_EVENT) || (event != READ_EVENT && notifier.listening?(event))
        end
      end
    end
  end
end
