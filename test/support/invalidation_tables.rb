# frozen_string_literal: true

require "strata/tiers/sql"

module Strata
  module TestSupport
    # The SQL tier's tables for the trigger tests: the entries, <table>_versions and <table>_log,
    # as the tier's create_table! makes them (Strata::Tiers::SQL::Schema).
    module InvalidationTables
      module_function

      # Creates table_name and its _versions and _log tables through connection.
      def create(connection, table_name)
        Strata::Tiers::SQL::Schema.create(connection, table_name)
      end

      def drop(connection, table_name)
        ["", "_versions", "_log"].each { |suffix| connection.drop_table("#{table_name}#{suffix}", if_exists: true) }
      end
    end
  end
end
