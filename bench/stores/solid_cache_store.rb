# frozen_string_literal: true

require_relative "rails_cache"
require_relative "../solid_cache_setup"
require_relative "../strata_loader"

module Strata
  module Bench
    module Stores
      # SolidCache::Store (the solid_cache gem, Rails' database-backed cache store) on its own
      # SQLite file in the run's private directory, set up without a Rails app (SolidCacheSetup).
      # Its defaults, except:
      # - max_size 256 MiB, the SQL tier's default, so that miss cases keep the file bounded and
      #   both stores pay for expiry.
      # - expiry_method :job, on Active Job's :inline adapter: expiry runs in the writing thread,
      #   as strata_sql's does, instead of the default background thread. With the sqlite3 gem 1.x
      #   that thread, waiting out SQLite's busy timeout for the write lock, holds Ruby's GVL, so
      #   the writer holding the lock cannot finish: the bench saw a 1 s stall and a "database is
      #   locked" every few thousand writes, which would time the stall rather than the store.
      # - clear_with :delete, which its default would pick by asking Rails.env.
      # The SQLite settings are Active Record 7.2's defaults (WAL, synchronous=NORMAL), as the
      # tier's. (Named SolidCacheStore so that inside Stores the gem's ::SolidCache is not shadowed.)
      class SolidCacheStore < RailsCache
        NAME = "solid_cache"

        MAX_SIZE = 256 * 1024 * 1024

        def self.unavailable_reason(env)
          SolidCacheSetup.load_error ||
            StrataLoader.probe_error("a SolidCache::Store round trip on SQLite") { smoke_test(env) }
        end

        def initialize(env)
          super
          @path = env.disk_path(NAME, ext: "sqlite3")
          SolidCacheSetup.connect(@path)
          # The store's failsafe turns a database error into a miss; collect them for #check.
          @errors = []
          on_error = ->(method:, exception:, **) { @errors << "#{method}: #{exception.class}: #{exception.message}" }
          @store = ::SolidCache::Store.new(max_size: MAX_SIZE, expiry_method: :job, clear_with: :delete,
            error_handler: on_error)
        rescue
          close # nobody else will: the caller has no instance to close
          raise
        end

        def check
          return if @errors.empty?

          raise "solid_cache swallowed #{@errors.size} errors, the first #{@errors.first}"
        end

        def close
          SolidCacheSetup.disconnect
          @env.remove_table(@path)
        end
      end
    end
  end
end
