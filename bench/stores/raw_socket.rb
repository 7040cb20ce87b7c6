# frozen_string_literal: true

require_relative "memcached_client"
require_relative "../meta_client"

module Strata
  module Bench
    module Stores
      # memcached through MetaClient: the meta protocol by hand, no serializer, no pool. With several
      # servers configured it talks to the first only.
      class RawSocket < MemcachedClient
        NAME = "raw_socket"

        def self.unavailable_reason(env)
          env.memcached_unreachable_reason
        end

        def initialize(env)
          super
          host, port = env.memcached_servers.first.split(":", 2)
          @client = MetaClient.new(host, Integer(port || 11_211))
        end
      end
    end
  end
end
