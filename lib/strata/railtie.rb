# frozen_string_literal: true

require "rails/railtie"

module Strata
  # Strata in a Rails app, loaded with the gem when Rails is (lib/strata.rb):
  #
  # - config.strata.log_invalidations: log each invalidate_tags at debug level
  #   (Strata::LogSubscriber). nil, the default: in development only.
  # - config.strata.sqlite_busy_handler: on Active Record before 8.0, SQLite connections wait for
  #   a lock with Ruby's GVL released (Strata::SQLiteBusyHandler), as 8.0's do. True by default;
  #   false keeps Active Record's busy_timeout.
  # - `bin/rails strata:stats`: this host's figures for the app's configured store, as
  #   `strata stats` prints them (Strata::CLI::Stats); JSON=1 for one JSON object, WATCH=1 to
  #   print again every second until interrupted.
  #
  # The generators (strata:install, strata:sql, strata:triggers) need nothing from here: Rails
  # finds them on the load path.
  class Railtie < ::Rails::Railtie
    config.strata = ActiveSupport::OrderedOptions.new
    config.strata.log_invalidations = nil
    config.strata.sqlite_busy_handler = true

    initializer "strata.log_subscriber" do |app|
      Railtie.attach_log_subscriber if Railtie.log_invalidations?(app.config.strata.log_invalidations, ::Rails.env)
    end

    initializer "strata.sqlite_busy_handler" do |app|
      if app.config.strata.sqlite_busy_handler
        ActiveSupport.on_load(:active_record_sqlite3adapter) do
          if ActiveRecord.version < Gem::Version.new("8.0")
            require "strata/sqlite_busy_handler"
            prepend Strata::SQLiteBusyHandler
          end
        end
      end
    end

    rake_tasks do
      namespace :strata do
        desc "Print this host's Strata cache figures for the app's config.cache_store (JSON=1, WATCH=1)"
        task :stats do
          Railtie.boot_without_cache_store { Rake::Task["environment"].invoke }
          code = Railtie.stats(::Rails.application.config.cache_store, json: ENV["JSON"].present?, watch: ENV["WATCH"].present?)
          exit(code) unless code.zero?
        end
      end
    end

    class << self
      # Whether invalidations are logged: setting, else in development only.
      def log_invalidations?(setting, env)
        setting.nil? ? env.to_s == "development" : setting
      end

      # Attaches Strata::LogSubscriber to the strata events, once.
      def attach_log_subscriber
        require "strata/log_subscriber"
        Strata::LogSubscriber.attach_to(:strata) unless ActiveSupport::LogSubscriber.log_subscribers.any?(Strata::LogSubscriber)
      end

      # Runs the block, which boots the app, with Rails.cache set beforehand to a NullStore
      # unless it is set already: Rails then keeps config.cache_store for the task to read and
      # builds no store, so that, as `strata stats`, the task creates no L1 table or SQLite file,
      # starts no poller and adds nothing to the host's counters.
      def boot_without_cache_store
        ::Rails.cache ||= ActiveSupport::Cache::NullStore.new
        yield
      end

      # Prints the figures of the tiers cache_store (a config.cache_store value) names, once or,
      # with watch, every second until interrupted. The exit status: 0 when printed; 1 when
      # cache_store is not :strata_store with its options, or when no tier could be read
      # (Strata::CLI::Stats.run's).
      def stats(cache_store, out: $stdout, err: $stderr, json: false, watch: false)
        name, options = Array(cache_store)
        if name != :strata_store
          err.puts("strata:stats: Rails.cache in #{::Rails.env} is #{describe(cache_store)}, not :strata_store " \
            "(config.cache_store); nothing to show")
          return 1
        end

        require "strata/cli/stats"
        Strata::CLI::Stats.new(Strata::CLI::Config.from_store_options(options || {}), out: out).run(watch: watch, count: nil, json: json)
      rescue StandardError, ScriptError => e
        err.puts("strata:stats: #{e.class}: #{e.message}")
        1
      end

      private

      def describe(cache_store)
        case cache_store
        when Symbol then cache_store.inspect
        when Array then cache_store.first.inspect
        when nil then "Rails' default"
        else "a #{cache_store.class.name} object (give :strata_store and its options for strata:stats)"
        end
      end
    end
  end
end
