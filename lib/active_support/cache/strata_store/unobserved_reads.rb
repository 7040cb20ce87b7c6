# frozen_string_literal: true

require "active_support/cache"
require "active_support/notifications"
require "strata/clock"
require "strata/counters"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # The hit path, and a cold fetch, when nobody is watching. On a live hit the base read and
      # fetch do nothing observable besides instrumenting: two event payloads (cache_read, then
      # cache_fetch_hit) that cost more than the L1 lookup itself. When no one subscribes to those
      # events and no debug logger would print them, this layer returns the hit directly.
      #
      # A fetch whose read-through finds nothing in any tier is a cold miss. Unless someone
      # subscribes to cache_read or cache_generate, this layer runs the block and writes its
      # value as the base save_block_result_to_cache does (a WriteOptions over a copy of the
      # options, skip_nil honoured), without the base fetch's second pass over the options, key
      # and read-through; and unless someone subscribes to cache_write, without the base write's
      # event payload and option copies either. Together they were a fifth of a cold miss through
      # three tiers.
      #
      # Everything else (an expired or mismatched entry, force, an active local cache, an error)
      # goes to the base path unchanged, which instruments, expires and reports as it always does.
      #
      # Reading twice must stay cheap: the probe reads only the host table (a miss there costs
      # next to nothing to repeat). A fetch that misses it starts the read-through here, and the
      # base path gets that read-through's answer without reading the lower tiers again.
      module UnobservedReads
        READ_EVENT = "cache_read.active_support"
        FETCH_HIT_EVENT = "cache_fetch_hit.active_support"
        GENERATE_EVENT = "cache_generate.active_support"
        # What the read-through of a fetch found when no tier holds the key.
        ABSENT = Object.new.freeze

        def fetch(name, options = nil, &block)
          return super unless block && !observed?(FETCH_HIT_EVENT)

          # A hit reads nothing of tags: (the entry carries its stamps), so a fetch given only
          # tags probes with the store's own options, and merges the given ones when it misses:
          # the merge (two Hash copies and the alias scan) cost a tagged hit more than its stamps.
          merged = merged_options(options) if options && !(options.size == 1 && options[:tags])
          probe = merged || @options
          return super if probe[:force]

          hidden = hidden_by_transaction?(merged || options || probe)
          return super if hidden

          key = normalize_key(name, probe)
          version = normalize_version(name, probe)
          local = local_cache
          unless local
            # nil: no transaction has tags pending, which a stamped hit then need not ask again.
            value = host_hit(key, probe, version, hidden.nil?)
            unless Codec::MISS.equal?(value)
              # Counted, not timed: timing it would add two clock reads to every hit.
              @read_hits.count_read_hit
              return value
            end
          end
          started = Strata::Clock.monotonic_us
          options = merged || (options ? merged_options(options) : @options)

          # One read-through for the whole fetch: the base path below gets this fill's answer
          # instead of reading the tiers again, and it skips the host table just probed.
          reading_through(key, !local) do
            value = through_hit(key, options, version, local)
            if ABSENT.equal?(value)
              # observed?(FETCH_HIT_EVENT) above found no debug logger and no cache_read
              # subscriber, and no code of the app's has run since: cache_generate is left.
              unless local || ActiveSupport::Notifications.notifier.listening?(GENERATE_EVENT)
                value = cold_fill(name, key, options, &block)
                @counters.operation(Strata::Counters::FETCH_MISS, started)
                next value
              end

              value = Codec::MISS
            end
            Codec::MISS.equal?(value) ? super : counted_hit(value, started)
          end
        end

        # A read that finds a value is a read_hit (Strata::Counters), timed, except the hits
        # answered here from the host table (counted only, as in #fetch).
        def read(name, options = nil)
          return counted_read(Strata::Clock.monotonic_us) { super } if observed?(READ_EVENT) || local_cache

          options = options ? merged_options(options) : @options
          key = normalize_key(name, options)
          value = host_hit(key, options, normalize_version(name, options), false)
          if Codec::MISS.equal?(value)
            # L1 alone, and L1 holds nothing under key (read once more, as the base read would,
            # which counts the miss and drops a stale copy): nil without the base read's options
            # and payload. Anything there goes the base way.
            return nil if @stack.host_only? && !current_read_through(key) && absent?(key)

            return counted_read(Strata::Clock.monotonic_us) { super }
          end

          @read_hits.count_read_hit
          value
        end

        private

        # value, a hit counted and timed.
        def counted_hit(value, started)
          @counters.operation(Strata::Counters::READ_HIT, started)
          value
        end

        # The block's value, counted and timed as a hit unless it is nil (a miss, as far as a
        # read can tell).
        def counted_read(started)
          value = yield
          @read_hits._operation_since(Strata::Counters::READ_HIT, started) unless value.nil?
          value
        end

        # The live value under key in the host table, when that is the top tier; else Codec::MISS.
        # Lower tiers are left to one read further on. Not with an active local cache: it answers
        # first.
        # none_pending: as Codec#live_value's.
        # An entry holding a bare String comes back from the table as its value, decoded and its
        # stamps checked in C (Stack#get_host_plain), unless what a read's stamps are handed to (a
        # transaction's pending tags, a computation's dependencies) is waiting for them.
        def host_hit(key, options, version, none_pending)
          if @stamp_reads.idle? && (none_pending || !Strata::TransactionTags.current)
            return Codec::MISS unless (found = @stack.get_host_plain(key))
            return found if found.instance_of?(String)

            bytes = found.first
            none_pending = true
          else
            bytes = @stack.get_host(key)
          end
          bytes ? @codec.live_value(bytes, options[:raw], version, none_pending) : Codec::MISS
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

        # The live value the read-through of key finds; ABSENT when no tier holds key, Codec::MISS
        # when what it found is not live (or could not be read).
        def through_hit(key, options, version, local)
          # The read-through (reading_through made its fill current); local: the active local
          # cache, nil when there is none (then read_bytes would only look again).
          bytes = local ? read_bytes(key, nil) : stack_read(key, nil)
          bytes ? @codec.live_value(bytes, options[:raw], version) : ABSENT
        rescue Strata::Error
          Codec::MISS
        end

        # What the base fetch does after a miss, minus its cache_generate event: nobody listens.
        # options are merged already, and stay so unless the block changes them.
        def cold_fill(name, key, options)
          capturing(key, options[:tags], options[:as_of]) do
            written = options.dup # the block may change them through WriteOptions
            value = counted_fill { yield(name, WriteOptions.new(written)) }
            next value if value.nil? && written[:skip_nil]

            # WriteOptions changes version, expires_in and expires_at only; merged again, an
            # expires_at becomes an expires_in and a negative one is reported (compared by the
            # fields, not with Hash#==, which every cold fetch would pay).
            written = merged_options(written) unless written[:expires_in].equal?(options[:expires_in]) && !written.key?(:expires_at)
            # UnobservedWrites: the key is normalized already; the block may have subscribed.
            write_observed? ? write(name, value, written) : write_unobserved(name, key, value, written)
            value
          end
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
