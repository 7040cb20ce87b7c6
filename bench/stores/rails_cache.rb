# frozen_string_literal: true

require_relative "base"
require_relative "../active_support_setup"

module Strata
  module Bench
    module Stores
      # A Rails cache store: every call goes to its own API, serializer and instrumentation
      # included. A subclass sets @store to the ActiveSupport::Cache::Store in its initialize.
      class RailsCache < Base
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
      end
    end
  end
end
