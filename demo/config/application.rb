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
  # STRATA_MEMCACHED   host:port,... to add memcached as L2
  # STRATA_DEMO_LOG_LEVEL  debug, info (default), warn ...
  class Application < Rails::Application
    config.load_defaults 7.2
    config.api_only = true
    config.enable_reloading = false
    config.eager_load = true
    # Migrations are the schema: the PostgreSQL triggers are not in a Ruby schema dump.
    config.active_record.dump_schema_after_migration = false

    config.logger = ActiveSupport::TaggedLogging.new(ActiveSupport::Logger.new($stdout))
    config.log_level = ENV.fetch("STRATA_DEMO_LOG_LEVEL", "info").to_sym

    # Rails.cache is Strata's store (config/initializers/strata.rb), made once Active Record knows
    # the database; until then nothing reads the cache.
    config.cache_store = :null_store
  end
end
