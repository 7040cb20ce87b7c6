# frozen_string_literal: true

require "active_support/cache"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # increment and decrement (tier counters: memcached, else L1, never SQL), and Rails 8.1's
      # read_counter and write_counter on the lines before it.
      module Counting
        # Add amount to the integer under name, atomically across every process sharing the table,
        # and return the new value. A missing key starts at amount (expires_in applies then); a value
        # that is not a counter (written without raw: true) gives nil, as with MemCacheStore.
        def increment(name, amount = 1, options = nil)
          count(:increment, name, amount, Integer(amount), options)
        end

        # Like increment, subtracting. A missing key starts at 0; counters never go below 0.
        def decrement(name, amount = 1, options = nil)
          count(:decrement, name, amount, -Integer(amount), options)
        end

        unless Store.method_defined?(:read_counter)
          # Rails 8.1's Store#read_counter, for the lines before it: the Integer under name, as
          # increment, decrement and write_counter leave it (a raw read); nil when there is none.
          def read_counter(name, **options)
            options = merged_options(options).merge(raw: true)
            read(name, **options)&.to_i
          end

          # Rails 8.1's Store#write_counter, for the lines before it: value (to_i) written raw under
          # name, a counter increment and decrement then change (in the tier counters live in:
          # memcached, else L1; not in SQL).
          def write_counter(name, value, **options)
            options = merged_options(options).merge(raw: true)
            write(name, value.to_i, **options)
          end
        end

        private

        # delta is the signed change. Tier counters are unsigned, so its sign picks incr or decr. A
        # missing key starts at delta when that is positive (MemCacheStore's increment), else at 0.
        def count(event, name, amount, delta, options)
          options = merged_options(options)
          key = normalize_key(name, options)
          ttl = write_ttl(options[:expires_in], nil, true)
          instrument(event, key, amount: amount) { @engine.increment(key, delta, ttl: ttl) }
        end
      end
    end
  end
end
