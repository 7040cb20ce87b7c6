# frozen_string_literal: true

require_relative "format"

module Strata
  module Bench
    # Loads the solid_cache gem without a Rails app and points it at one SQLite file at a time.
    #
    # What an app's boot would do, done by hand:
    # - The gem's engine needs Rails loaded first (`require "rails"`); its models and its expiry job
    #   (app/models, app/jobs) are left to the app's autoloader, so a Zeitwerk loader of our own
    #   autoloads them here.
    # - SolidCache::Record, the abstract class its Entry model inherits from, uses the database of
    #   ActiveRecord::Base unless the configuration names one (connects_to). We give the Record
    #   class its own pool instead, so nothing else in the process shares the connection.
    # - The table comes from the gem's own SQLite structure file (what `bin/rails
    #   solid_cache:install` copies into an app that keeps db/structure.sql).
    # - Configuration is the gem's default (no database, no shards): Connections::Unmanaged,
    #   which uses whatever pool Record has.
    # - Its expiry job runs on Active Job's :inline adapter, for stores made with
    #   expiry_method: :job (see Stores::SolidCacheStore), and Active Job logs nothing.
    #
    # An app on Rails 7.2 gets the same SQLite settings from Active Record's defaults: WAL journal,
    # synchronous=NORMAL. The bundle for activesupport 7.1 has no solid_cache (it wants Active
    # Record 7.2); there load_error says so and the store is skipped.
    module SolidCacheSetup
      GEM = "solid_cache"
      STRUCTURE = "lib/generators/solid_cache/install/templates/db/cache_structure.sqlite3.sql"
      # What Strata::Tiers::SQL's embedded pool uses: connections, and ms a writer waits for the lock.
      POOL = 5
      BUSY_TIMEOUT_MS = 1000

      @load_error = nil
      @loaded = false

      module_function

      # nil once the gem and its models load, else a one-line reason. Loads at most once.
      def load_error
        return @load_error if @loaded || @load_error

        unless Gem.loaded_specs.key?(GEM)
          return @load_error = "the #{GEM} gem is not in this bundle (gemfiles/activesupport_7_2.gemfile has it)"
        end

        @load_error = begin
          load_gem
          @loaded = true
          nil
        rescue ScriptError, StandardError => e
          "#{GEM} does not load (#{Format.error(e)})"
        end
      end

      # Connects SolidCache::Record's own pool to a new SQLite file at path and creates the cache
      # table in it. Only one file at a time: a second call replaces the first's pool.
      def connect(path)
        ::SolidCache::Record.establish_connection(
          adapter: "sqlite3", database: path, pool: POOL, timeout: BUSY_TIMEOUT_MS,
          pragmas: {journal_mode: :wal, synchronous: :normal}
        )
        ::SolidCache::Record.connection_pool.with_connection do |connection|
          statements.each { |sql| connection.execute(sql) }
        end
      end

      # Closes the pool (and so the file). The store made on it must not be used afterwards.
      def disconnect
        ::SolidCache::Record.remove_connection
      end

      def load_gem
        require "active_record"
        require "active_job"
        require "rails" # solid_cache's engine subclasses Rails::Engine
        require GEM
        app = Zeitwerk::Loader.new
        app.tag = "strata-bench-solid_cache-app"
        %w[models jobs].each { |dir| app.push_dir(File.join(gem_dir, "app", dir)) }
        app.setup
        ActiveJob::Base.logger = nil # the default logs every job to stdout
        ::SolidCache::ExpiryJob.queue_adapter = :inline
        ::SolidCache::Entry # load the model now, not inside the first timed call
      end

      def statements
        @statements ||= File.read(File.join(gem_dir, STRUCTURE)).split(/;\s*$/).map(&:strip).reject(&:empty?).freeze
      end

      def gem_dir
        Gem.loaded_specs.fetch(GEM).gem_dir
      end
    end
  end
end
