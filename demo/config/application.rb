# frozen_string_literal: true

require_relative "boot"

require "rails"
require "active_model/railtie"
require "active_record/railtie"
require "action_controller/railtie"

Bundler.require(*Rails.groups)

module StrataDemo
  # The demo app (docs/demo.md): bugs, their tags, projects and people, served as JSON whose entry
  # strings Strata::Representation caches. It runs the same way in every environment: classes
  # loaded once (Puma's workers fork from a booted app), logs on standard output.
  #
  # The environment it reads:
  # DATABASE_URL       the database (default: SQLite, storage/demo.sqlite3; bin/demo sets it)
  # STRATA_DEMO_L1     the L1 table's file (default tmp/strata-demo.l1)
  # STRATA_MEMCACHED   host:port,... to add memcached as L2 (config.cache_store below)
  # STRATA_DEMO_LOG_LEVEL  debug, info (default), warn ...
  # STRATA_DEMO_CACHE  strata (default), or for bin/cluster's comparison mem_cache_store (Rails'
  #                    own store, Dalli, on STRATA_MEMCACHED) or null_store: Rails.cache for the
  #                    view fragments (the models then invalidate nothing: Strata::Model warns)
  class Application < Rails::Application
    config.load_defaults 8.1
    config.api_only = true
    config.enable_reloading = false
    config.eager_load = true
    # Migrations are the schema: the PostgreSQL triggers are not in a Ruby schema dump.
    config.active_record.dump_schema_after_migration = false
    # The view fragments of PagesController go to Rails.cache.
    config.action_controller.perform_caching = true

    config.logger = ActiveSupport::TaggedLogging.new(ActiveSupport::Logger.new($stdout))
    config.log_level = ENV.fetch("STRATA_DEMO_LOG_LEVEL", "info").to_sym

    # Rails.cache: Strata's store. L1, one table file every process of the app maps (Puma's
    # workers fork from the booted app, so they share it), over the SQL tier in the app's own
    # database: its tag versions and invalidation log sit beside the bugs, where the triggers of
    # a raw SQL UPDATE reach them, and each host's poller follows that log. memcached joins as
    # L2 when STRATA_MEMCACHED names servers. The connection class goes by name: the models
    # can't be loaded while Rails reads this, and the store looks it up once the app has booted.
    # The database tasks go without it (Rakefile).
    servers = ENV["STRATA_MEMCACHED"].to_s.split(",")
    config.cache_store = case ENV.fetch("STRATA_DEMO_CACHE", "strata")
    when "strata"
      [:strata_store, {
        namespace: "demo",
        l1: {path: ENV.fetch("STRATA_DEMO_L1") { File.expand_path("../tmp/strata-demo.l1", __dir__) }, size: 32 << 20},
        sql: {connection_class: "ApplicationRecord"},
        **(servers.empty? ? {} : {memcached: {servers: servers}})
      }]
    when "mem_cache_store"
      raise ArgumentError, "STRATA_DEMO_CACHE=mem_cache_store needs STRATA_MEMCACHED" if servers.empty?

      [:mem_cache_store, *servers, {namespace: "demo"}]
    when "null_store" then :null_store
    else raise ArgumentError, "STRATA_DEMO_CACHE must be strata, mem_cache_store or null_store, got #{ENV["STRATA_DEMO_CACHE"].inspect}"
    end
  end
end
