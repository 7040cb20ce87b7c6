# frozen_string_literal: true

module Strata
  module Bench
    module Stores
      # The contract every benchmarked store implements: four calls over String keys and values.
      # Byte stores (a Hash, a socket, the L1 tier) inherit #fetch as read, else yield and write;
      # Rails stores subclass RailsCache, which passes every call to their own API.
      #
      # To add a store: subclass Base (or RailsCache) in bench/stores/NAME.rb, set NAME, add it to
      # Stores::ALL.
      class Base
        # Optional. nil when the store can run in env, else a one-line reason; it is then skipped
        # with that note. Called once per run, before any instance is made.
        def self.unavailable_reason(_env)
          nil
        end

        # For unavailable_reason: open, write, read back, check, close. Raises when the store does
        # not work at all on this host.
        def self.smoke_test(env)
          store = new(env)
          store.write("strata-bench:probe", "ok")
          got = store.read("strata-bench:probe")
          raise "read back #{got.inspect}" unless got == "ok"

          store.check
        ensure
          store&.close
        end

        # Required. Open the store. env gives the scratch directory and the memcached servers.
        def initialize(env)
          @env = env
        end

        # Optional. The value under key; on a miss, the block's value, written under key.
        def fetch(key)
          value = read(key)
          return value unless value.nil?

          value = yield
          write(key, value)
          value
        end

        # Required. The value under key, or nil.
        def read(key)
          raise NotImplementedError, "#{self.class} must implement read"
        end

        # Required. Store value under key.
        def write(key, value)
          raise NotImplementedError, "#{self.class} must implement write"
        end

        # Required. A Hash of key => value for the keys present.
        def read_multi(keys)
          raise NotImplementedError, "#{self.class} must implement read_multi"
        end

        # Optional. Raises when the store hid a failure since it was opened (a store that turns
        # errors into misses would otherwise be timed failing). The runner calls it after a cell.
        def check
        end

        # Optional. Release files and sockets; the instance is not used afterwards.
        def close
        end
      end
    end
  end
end
