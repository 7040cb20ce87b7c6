# frozen_string_literal: true

require_relative "rails_cache"

module Strata
  module Bench
    module Stores
      # ActiveSupport::Cache::FileStore, Rails' own durable store for one host, with its defaults,
      # in a directory on disk (Environment#disk_path) as an app's tmp/cache is: what a single-host
      # app that wants its cache to survive restarts uses without Strata.
      class FileStore < RailsCache
        NAME = "file_store"

        def initialize(env)
          super
          @dir = env.disk_path(NAME, ext: "d")
          @store = ActiveSupport::Cache::FileStore.new(@dir)
        end

        def close
          FileUtils.rm_rf(@dir)
        end
      end
    end
  end
end
