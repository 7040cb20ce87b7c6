# frozen_string_literal: true

require_relative "rails_cache"

module Strata
  module Bench
    module Stores
      # The floor of the Rails API: an ActiveSupport::Cache::Store whose entries are the Entry
      # objects Active Support hands it, kept in a Hash as they are. No serializing, no copying, no
      # locking, no eviction: what is left is Active Support's own work per call (key
      # normalisation, options, instrumentation, Entry checks), the limit any store reaches through
      # this API. The ratio tables give every store as a share of it.
      class RailsFloor < RailsCache
        NAME = "rails_floor"

        # The store itself: the four entry methods Active Support's public API calls into.
        class Store < ActiveSupport::Cache::Store
          def initialize(options = nil)
            super
            @data = {}
          end

          def clear(options = nil)
            @data.clear
            true
          end

          private

          def read_entry(key, **)
            @data[key]
          end

          def write_entry(key, entry, **)
            @data[key] = entry
            true
          end

          def delete_entry(key, **)
            !@data.delete(key).nil?
          end
        end

        def initialize(env)
          super
          @store = Store.new
        end

        def close
          @store.clear
        end
      end
    end
  end
end
