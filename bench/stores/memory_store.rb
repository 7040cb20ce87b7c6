# frozen_string_literal: true

require_relative "rails_cache"

module Strata
  module Bench
    module Stores
      # ActiveSupport::Cache::MemoryStore with its defaults (32 MB, pruned LRU, values duplicated on
      # read). In-process like ruby_hash, but through the Rails API.
      class MemoryStore < RailsCache
        NAME = "memory_store"

        def initialize(env)
          super
          @store = ActiveSupport::Cache::MemoryStore.new
        end

        def close
          @store.clear
        end
      end
    end
  end
end
