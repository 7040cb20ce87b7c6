# frozen_string_literal: true

require_relative "memcached_client"
require_relative "../strata_loader"

module Strata
  module Bench
    module Stores
      # Strata::Meta::Client, Strata's own memcached client, used directly: bytes in, bytes out, no
      # Rails. Like raw_socket it talks to the first configured server only, so the three client
      # stores compare client cost, not distribution. Skipped with the reason when the client does
      # not load (not written yet, extension not built) or its round trip fails.
      class StrataMemcached < MemcachedClient
        NAME = "strata_memcached"

        FEATURE = "strata/meta/client"

        def self.unavailable_reason(env)
          env.memcached_unreachable_reason ||
            StrataLoader.load_error(FEATURE) ||
            StrataLoader.probe_error("a Strata::Meta::Client round trip") { smoke_test(env) }
        end

        def initialize(env)
          super
          @client = Strata::Meta::Client.new(servers: [env.memcached_servers.first])
        end
      end
    end
  end
end
