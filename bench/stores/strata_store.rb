# frozen_string_literal: true

require_relative "rails_cache"
require_relative "strata_l1"
require_relative "tier_failures"
require_relative "../strata_loader"

module Strata
  module Bench
    module Stores
      # ActiveSupport::Cache::StrataStore through the Rails API as the README sets it up: the
      # embedded default, L1 (a shared-memory table) over L3 (an SQLite file), no server needed.
      # Hits are L1 hits; a miss reads through to SQLite and writes both tiers. The table lives in the
      # run's tmpfs directory, the SQLite file in its disk one; both go on close.
      class StrataStore < RailsCache
        include TierFailures

        NAME = "strata_store"

        def self.unavailable_reason(env)
          StrataLoader.load_error("active_support/cache/strata_store") ||
            StrataLoader.probe_error("a StrataStore (L1 + SQLite) round trip") { smoke_test(env) }
        end

        # The ActiveSupport::Cache::StrataStore, for reports that call what the bench's four calls
        # don't (invalidate_tags, write_multi).
        attr_reader :cache

        def initialize(env)
          super
          @paths = []
          @store = @cache = ActiveSupport::Cache::StrataStore.new(**tiers(env))
        end

        # The store's tier options: L1 and SQLite, each in a fresh file (kept in @paths for close),
        # then more_tiers. A subclass may build other layouts from l1_tier and sql_tier.
        def tiers(env)
          {l1: l1_tier(env), sql: sql_tier(env), **more_tiers(env)}
        end

        def l1_tier(env)
          {path: owned(env.table_path(self.class::NAME)), size: StrataL1::TABLE_BYTES}
        end

        def sql_tier(env)
          {path: owned(env.disk_path(self.class::NAME, ext: "sqlite3"))}
        end

        # Tiers besides L1 and SQLite; a subclass adds memcached.
        def more_tiers(_env)
          {}
        end

        # path, removed on close.
        def owned(path)
          (@paths << path).last
        end

        def close
          @store.close
          @paths.each { |path| @env.remove_table(path) }
        end
      end
    end
  end
end
