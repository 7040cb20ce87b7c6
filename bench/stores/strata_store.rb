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
      # Hits are L1 hits; a miss reads through to SQLite and writes both tiers. Both files live in
      # the run's private directory and go on close.
      class StrataStore < RailsCache
        include TierFailures

        NAME = "strata_store"

        def self.unavailable_reason(env)
          StrataLoader.load_error("active_support/cache/strata_store") ||
            StrataLoader.probe_error("a StrataStore (L1 + SQLite) round trip") { smoke_test(env) }
        end

        def initialize(env)
          super
          name = self.class::NAME
          @paths = [env.table_path(name), env.table_path(name, ext: "sqlite3")]
          @store = ActiveSupport::Cache::StrataStore.new(
            l1: {path: @paths[0], size: StrataL1::TABLE_BYTES}, sql: {path: @paths[1]}, **more_tiers(env)
          )
        end

        # Tiers besides L1 and SQLite; a subclass adds memcached.
        def more_tiers(_env)
          {}
        end

        def close
          @store.close
          @paths.each { |path| @env.remove_table(path) }
        end
      end
    end
  end
end
