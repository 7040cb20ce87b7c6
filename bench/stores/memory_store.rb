# frozen_string_literal: true

require_relative "rails_cache"

module Strata
  module Bench
    module Stores
      # ActiveSupport::Cache::MemoryStore with its defaults (pruned LRU, values duplicated on read)
      # but its size: 256 MB rather than 32, so that it holds the 50 MiB working set of the large
      # cases as L1 does. In-process like ruby_hash, but through the Rails API.
      class MemoryStore < RailsCache
        NAME = "memory_store"

        SIZE = 256 * 1024 * 1024

        def initialize(env)
          super
          @store = ActiveSupport::Cache::MemoryStore.new(size: SIZE)
        end

        def close
          @store.clear
        end
      end
    end
  end
end
