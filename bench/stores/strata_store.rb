# frozen_string_literal: true

require_relative "rails_cache"
require_relative "strata_l1"
require_relative "../strata_loader"

module Strata
  module Bench
    module Stores
      # ActiveSupport::Cache::StrataStore through the Rails API with L1 only: what an app's
      # Rails.cache pays over strata_l1 (keys, serializer, entry header, instrumentation).
      class StrataStore < RailsCache
        NAME = "strata_store"

        def self.unavailable_reason(env)
          StrataLoader.load_error("active_support/cache/strata_store") ||
            StrataLoader.probe_error("a StrataStore round trip") { smoke_test(env) }
        end

        def initialize(env)
          super
          @path = env.table_path(NAME)
          @store = ActiveSupport::Cache::StrataStore.new(l1: {path: @path, size: StrataL1::TABLE_BYTES})
        end

        def close
          @store.close
          @env.remove_table(@path)
        end
      end
    end
  end
end
