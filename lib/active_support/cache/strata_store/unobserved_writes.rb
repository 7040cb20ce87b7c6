# frozen_string_literal: true

require "active_support/cache"
require "active_support/notifications"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # A write when nobody is watching. The base #write merges the options, normalizes the key,
      # and inside its cache_write event builds the Entry and calls #write_entry. When no one
      # subscribes to cache_write and no debug logger would print it, this layer does the same
      # without the event: its payload, the instrumenter's lookup and one copy of the options
      # (Entry.new(**options.merge(version:))) cost about 3.5 us a write here, as much as
      # copying 25 KB into L1 (docs/benchmarks.md, "L1 alone against MemoryStore at 25 KB").
      #
      # Everything else goes to the base path unchanged: a subscriber, a debug logger, an active
      # local cache (its block keeps what is written). Options are merged and checked as the
      # base merges them (merged_options: an expires_at becomes an expires_in, a negative one is
      # reported), and write_entry takes them as it always does (tags, transactions, counting).
      module UnobservedWrites
        WRITE_EVENT = "cache_write.active_support"

        def write(name, value, options = nil)
          return super if write_observed? || local_cache

          options = options ? merged_options(options) : @options
          write_unobserved(name, normalize_key(name, options), value, options)
        end

        private

        # The base #write's Entry and #write_entry, without its cache_write payload: key is name
        # normalized with options, which are merged. (Fetch#generate writes its block's value
        # this way too; WriteOptions lets a block change the version and expiry, not the
        # namespace.)
        def write_unobserved(name, key, value, options)
          entry = Entry.new(value, version: normalize_version(name, options), expires_in: options[:expires_in])
          store_entry(key, entry, options, false) # write_entry's, past the LocalCache layer: none is active
        end

        def write_observed?
          logger&.debug? || ActiveSupport::Notifications.notifier.listening?(WRITE_EVENT)
        end
      end
    end
  end
end
