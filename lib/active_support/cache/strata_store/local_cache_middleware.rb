# frozen_string_literal: true

require "active_support/cache"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # Rails 8.1's local cache middleware API, for the lines before it (prepended after
      # Strategy::LocalCache where that lacks new_local_cache): #new_local_cache and
      # #unset_local_cache, and a #middleware whose cache can be replaced (Middleware#cache=),
      # so that the middleware inserted at boot can follow a store that replaces Rails.cache:
      #
      #   old = Rails.cache
      #   Rails.cache = ActiveSupport::Cache.lookup_store(:strata_store, ...)
      #   old.middleware.cache = Rails.cache
      #
      # The middleware Rails 7.1 to 8.0 build holds the store's local cache key instead, and
      # would go on opening a local cache for the old store only.
      module LocalCacheMiddleware
        # A local cache for this store in this thread (or fiber: Rails' isolation level), until
        # unset_local_cache.
        def new_local_cache
          Strategy::LocalCache::LocalCacheRegistry.set_cache_for(local_cache_key, Strategy::LocalCache::LocalStore.new)
        end

        def unset_local_cache
          Strategy::LocalCache::LocalCacheRegistry.set_cache_for(local_cache_key, nil)
        end

        # Rack middleware that gives each request a local cache of #cache (this store, until
        # replaced). Rack is loaded on first call, as Rails loads its own middleware.
        def middleware
          @middleware ||= begin
            require "rack/body_proxy"
            Middleware.new("ActiveSupport::Cache::Strategy::LocalCache", self)
          end
        end

        # Rails 8.1's Strategy::LocalCache::Middleware: the same name (what Rails' middleware
        # stack lists and deletes it by), and a cache the app may replace. A request unsets the
        # local cache of the store it set one for, should the cache be replaced meanwhile.
        class Middleware
          attr_reader :name
          attr_accessor :cache

          def initialize(name, cache)
            @name = name
            @cache = cache
            @app = nil
          end

          def new(app)
            @app = app
            self
          end

          # The local cache lives until the response's body is closed (Rack::BodyProxy), or
          # until the app raises.
          def call(env)
            store = cache
            store.new_local_cache
            begin
              status, headers, body = @app.call(env)
            rescue Exception # rubocop:disable Lint/RescueException -- unset whatever ends the request, then re-raise
              store.unset_local_cache
              raise
            end
            [status, headers, ::Rack::BodyProxy.new(body) { store.unset_local_cache }]
          end
        end
      end
    end
  end
end
