# frozen_string_literal: true

require_relative "strata_store"

module Strata
  module Bench
    module Stores
      # ActiveSupport::Cache::StrataStore with all three tiers: L1 (a shared-memory table), L2
      # (memcached, every configured server) and L3 (an SQLite file). Hits are L1 hits; a miss
      # goes through memcached (with its lease) and SQLite, then writes all three. Set beside
      # mem_cache_store on the same servers; the miss cost report compares their miss_30b.
      #
      # The SQLite tier writes the invalidation log, as the app's database does by default
      # (connection_class:), so a poller runs and L1 keeps its copies: the layout several hosts
      # run. Without a log, L1 over memcached keeps each copy at most coherence_interval
      # (docs/coherence.md), and every key's hit would go to memcached once a second.
      class StrataStoreFull < StrataStore
        NAME = "strata_store_full"

        def self.unavailable_reason(env)
          env.memcached_unreachable_reason ||
            StrataLoader.load_error("active_support/cache/strata_store") ||
            StrataLoader.probe_error("a StrataStore (L1 + memcached + SQLite) round trip") { smoke_test(env) }
        end

        def sql_tier(env)
          super.merge(invalidation_log: true)
        end

        def more_tiers(env)
          {memcached: {servers: env.memcached_servers}}
        end
      end
    end
  end
end
