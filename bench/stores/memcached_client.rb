# frozen_string_literal: true

require_relative "base"

module Strata
  module Bench
    module Stores
      # Base of the stores that drive a memcached client directly (raw_socket, dalli,
      # strata_memcached): reads, writes and multi-reads pass straight to @client, which each
      # subclass builds, so the three differ only in the client under test.
      class MemcachedClient < Base
        def read(key)
          @client.get(key)
        end

        # A write memcached answers "SERVER_ERROR out of memory storing object" (it found nothing
        # to evict in that item size's slabs, which a full run's mix of sizes can bring about) is
        # a refused write, false, as raw_socket and MemCacheStore count it, not a failed cell.
        # The hit-ratio check still reports the keys it lost.
        def write(key, value)
          store(key, value)
        rescue => e
          raise unless out_of_memory?(e)

          false
        end

        def read_multi(keys)
          @client.get_multi(keys)
        end

        def close
          @client.close
        end

        private

        # The client's set.
        def store(key, value)
          @client.set(key, value)
        end

        # Whether error is the client's way of saying the server ran out of memory for a write.
        def out_of_memory?(error)
          error.message.include?("out of memory")
        end
      end
    end
  end
end
