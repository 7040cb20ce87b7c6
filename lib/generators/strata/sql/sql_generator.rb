# frozen_string_literal: true

require "active_record"
require "rails/generators"
require "rails/generators/active_record/migration"

module Strata
  module Generators
    # bin/rails generate strata:sql [--table-name=NAME] [--database=NAME]
    #
    # Writes a migration that creates the tables of Strata's SQL tier (Strata::Tiers::SQL: the
    # entries, NAME_versions and NAME_log), into db/migrate or, with --database, into that
    # database's migrations path. Pass the same table name to the tier's table_name: option.
    class SqlGenerator < Rails::Generators::Base
      include ActiveRecord::Generators::Migration

      # As Strata::Tiers::SQL::TABLE_NAME: "_versions" must still fit in 63 characters.
      TABLE_NAME = /\A[A-Za-z_][A-Za-z0-9_]{0,53}\z/

      source_root File.expand_path("templates", __dir__)

      class_option :table_name, type: :string, default: "strata_entries", desc: "The table's name"
      class_option :database, type: :string, desc: "The database (in config/database.yml) the table goes in"

      def create_migration_file
        raise Thor::Error, "--table-name must be an SQL identifier of at most 54 characters, got #{table_name.inspect}" unless TABLE_NAME.match?(table_name)

        migration_template "create_strata_entries.rb.tt", File.join(db_migrate_path, "create_#{table_name}.rb")
      end

      private

      def table_name
        options[:table_name]
      end
    end
  end
end
