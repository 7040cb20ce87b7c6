# frozen_string_literal: true

require_relative "base"
require_relative "strata_l1"
require_relative "../active_support_setup"
require_relative "../strata_loader"

module Strata
  module Bench
    module Stores
      # ActiveSupport::Cache::StrataStore through the Rails API with L1 only: what an app's
      # Rails.cache pays over strata_l1 (keys, serializer, entry header, instrumentation).
      class StrataStore < Base
        NAME = "strata_store"

        def self.unavailable_reason(env)
          StrataLoader.load_error("active_support/cache/strata_store") ||
            StrataLoader.probe_error("a StrataStore round trip") { smoke_test(env) }
        end

        def self.smoke_test(env)
          store = new(env)
          store.write("strata-bench:probe", "ok")
          raise "read back #{store.read("strata-bench:probe").inspect}" unless store.read("strata-bench:probe") == "ok"
        ensure
          store&.close
        end

        def initialize(env)
          super
          @path = env.table_path(NAME)
          @store = ActiveSupport::Cache::StrataStore.new(l1: {path: @path, size: StrataL1::TABLE_BYTES})
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
          # The adapter is written alongside the bench; close it if it offers a way.
          @store.close if @store.respond_to?(:close)
          @env.remove_table(@path)
        end
      end
    end
  end
end
