# frozen_string_literal: true

require_relative "rails_cache"
require_relative "tier_failures"
require_relative "../strata_loader"

module Strata
  module Bench
    module Stores
      # ActiveSupport::Cache::StrataStore with memcached alone (no L1): the Rails API over our meta
      # client, to set beside mem_cache_store (the Rails API over Dalli) on the same servers.
      class StrataStoreL2 < RailsCache
        include TierFailures

        NAME = "strata_store_l2"

        def self.unavailable_reason(env)
          env.memcached_unreachable_reason ||
            StrataLoader.load_error("active_support/cache/strata_store") ||
            StrataLoader.probe_error("a StrataStore memcached round trip") { smoke_test(env) }
        end

        def initialize(env)
          super
          @store = ActiveSupport::Cache::StrataStore.new(memcached: {servers: env.memcached_servers})
        end

        def close
          @store.close
        end
      end
    end
  end
end
