# frozen_string_literal: true

require_relative "strata_store"

module Strata
  module Bench
    module Stores
      # ActiveSupport::Cache::StrataStore with L1 alone, through the Rails API: the README's first
      # configuration, one host's processes sharing one table and nothing durable beneath it.
      class StrataStoreL1 < StrataStore
        NAME = "strata_store_l1"

        def self.unavailable_reason(env)
          StrataLoader.load_error("active_support/cache/strata_store") ||
            StrataLoader.probe_error("a StrataStore (L1 alone) round trip") { smoke_test(env) }
        end

        def tiers(env)
          {l1: l1_tier(env)}
        end
      end
    end
  end
end
