# frozen_string_literal: true

require_relative "rails_cache"
require "active_support/cache/mem_cache_store"

module Strata
  module Bench
    module Stores
      # ActiveSupport::Cache::MemCacheStore (Dalli underneath) with Rails' defaults: a connection
      # pool, compression tried on values of 1 KiB and more. Every configured server is in its ring.
      class MemCacheStore < RailsCache
        NAME = "mem_cache_store"

        def self.unavailable_reason(env)
          env.memcached_unreachable_reason
        end

        def initialize(env)
          super
          @store = ActiveSupport::Cache::MemCacheStore.new(*env.memcached_servers)
        end
      end
    end
  end
end
