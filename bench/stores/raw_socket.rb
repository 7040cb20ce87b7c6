# frozen_string_literal: true

require_relative "base"
require_relative "../meta_client"

module Strata
  module Bench
    module Stores
      # memcached through MetaClient: the meta protocol by hand, no serializer, no pool. With several
      # servers configured it talks to the first only.
      class RawSocket < Base
        NAME = "raw_socket"

        def self.unavailable_reason(env)
          env.memcached_unreachable_reason
        end

        def initialize(env)
          super
          host, port = env.memcached_servers.first.split(":", 2)
          @client = MetaClient.new(host, Integer(port || 11_211))
        end

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
