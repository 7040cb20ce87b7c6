# frozen_string_literal: true

require_relative "memcached_client"
require "dalli"

module Strata
  module Bench
    module Stores
      # The dalli gem's own client API, no Rails: bytes in, bytes out. Values are written raw (no
      # Marshal, no serialized flag, so reads hand the bytes back untouched) and never compressed,
      # over the meta protocol that raw_socket and strata_memcached speak. Like raw_socket it talks
      # to the first configured server only, so the three compare client cost, not distribution.
      # (Named DalliClient so that inside Stores the gem's ::Dalli is not shadowed.)
      class DalliClient < MemcachedClient
        NAME = "dalli"

        # Per-request options for writes: skip the serializer.
        RAW = {raw: true}.freeze

        def self.unavailable_reason(env)
          env.memcached_unreachable_reason
        end

        def initialize(env)
          super
          @client = ::Dalli::Client.new(env.memcached_servers.first, protocol: :meta, compress: false)
        end

        private

        def store(key, value)
          @client.set(key, value, 0, RAW)
        end

        # Dalli's message drops the reason ("Response error: SERVER_ERROR"); for these sets it is
        # memory (see MemcachedClient#write).
        def out_of_memory?(error)
          error.is_a?(Dalli::DalliError) && error.message.end_with?("SERVER_ERROR")
        end
      end
    end
  end
end
