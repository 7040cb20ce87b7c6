# frozen_string_literal: true

require "active_record"
require "rails/generators"
require "rails/generators/active_record/migration"
require "generators/strata/triggers/cascades"

module Strata
  module Generators
    # bin/rails generate strata:triggers TABLE [TABLE...] [--primary-key=id] [--table-name=NAME] [--database=NAME]
    #
    # Writes a migration that installs triggers on the tables (PostgreSQL, MySQL, MariaDB or
    # SQLite): a row inserted, updated or deleted by any SQL, psql and raw UPDATEs included, gives
    # its record tag ("bugs/42") and its table's collection tag ("bugs") new versions in the SQL
    # tier's versions table and writes them to its invalidation log, as Strata::Model does after
    # a commit (docs/coherence.md, "Raw SQL"). On SQLite the triggers write the tags as text to
    # <table-name>_raw_tags, which the hosts' pollers turn into versions and log rows. --table-name is the SQL tier's table (its _versions and _log
    # tables must exist in the same database); --primary-key the column the record tags are made
    # of, the same for every table named. The app's models are loaded: their strata_cascade
    # declarations go into the migration (Cascades), so a raw change of a child row changes its
    # parents as a model's change does.
    class TriggersGenerator < Rails::Generators::Base
      include ActiveRecord::Generators::Migration

      # A table name: letters (any script), digits and underscores, at most 63 bytes.
      IDENTIFIER = /\A[\p{L}_][\p{L}\p{N}_]*\z/
      MAX_IDENTIFIER_BYTES = 63

      source_root File.expand_path("templates", __dir__)

      argument :tables, type: :array, banner: "TABLE [TABLE...]", desc: "The tables whose rows are tagged"
      class_option :primary_key, type: :string, default: "id", desc: "The column record tags are made of"
      class_option :table_name, type: :string, default: "strata_entries", desc: "The SQL tier's table"
      class_option :database, type: :string, desc: "The database (in config/database.yml) the tables are in"

      # A refused name ends the command with a failure status.
      def self.exit_on_failure?
        true
      end

      def create_migration_file
        (tables + [options[:primary_key], options[:table_name]]).each do |name|
          unless IDENTIFIER.match?(name) && name.bytesize <= MAX_IDENTIFIER_BYTES
            raise Thor::Error, "#{name.inspect} is not an SQL identifier (letters, digits, underscores; at most 63 bytes)"
          end
        end

        migration_template "add_strata_triggers.rb.tt", File.join(db_migrate_path, "#{file_name}.rb")
      end

      private

      def file_name
        "add_strata_triggers_to_#{tables.join("_")}"
      end

      def primary_key
        options[:primary_key]
      end

      def table_name
        options[:table_name]
      end

      def cascades_source
        Cascades.source(Cascades.of_models(tables, app_models))
      end

      # The app's Active Record models, all loaded (outside an app: those loaded already).
      def app_models
        ::Rails.application.eager_load! if defined?(::Rails.application) && ::Rails.application
        defined?(Strata::Model) ? ActiveRecord::Base.descendants : []
      end
    end
  end
end
