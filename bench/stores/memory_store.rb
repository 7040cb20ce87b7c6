# frozen_string_literal: true

require_relative "base"
require_relative "../active_support_setup"

module Strata
  module Bench
    module Stores
      # ActiveSupport::Cache::MemoryStore with its defaults (32 MB, pruned LRU, values duplicated on
      # read). In-process like ruby_hash, but through the Rails API.
      class MemoryStore < Base
        NAME = "memory_store"

        def initialize(env)
          super
          @store = ActiveSupport::Cache::MemoryStore.new
        end

        def fetch(key, &block)
          @store.fetch(key, &block)
        end

        def read(key)
          @store.read(key)
        end

        def write(key, value)
          @store.write(key, value)
        end

        def read_multi(keys)
          @store.read_multi(*keys)
        end

        def close
          @store.clear
        end
      end
    end
  end
end
