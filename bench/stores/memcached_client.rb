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

        def write(key, value)
          @client.set(key, value)
        end

        def read_multi(keys)
          @client.get_multi(keys)
        end

        def close
          @client.close
        end
      end
    end
  end
end
