# frozen_string_literal: true

module Strata
  module TestSupport
    # The SQL tier's versions and log tables (the shared schema of issue 22: <table>_versions,
    # <table>_log), made here for the trigger tests until the tier's create_table! makes them;
    # the one place to swap for it.
    module InvalidationTables
      module_function

      # Creates table_name's _versions and _log tables through connection (PostgreSQL or MySQL).
      def create(connection, table_name)
        versions = connection.quote_table_name("#{table_name}_versions")
        log = connection.quote_table_name("#{table_name}_log")
        if connection.adapter_name.match?(/postg/i)
          connection.execute("CREATE TABLE #{versions} (tag_id bigint PRIMARY KEY, version bigint NOT NULL)")
          connection.execute("CREATE TABLE #{log} (id bigserial PRIMARY KEY, created_at bigint NOT NULL, " \
            "tag_id bigint NULL, key bytea NULL)")
        else
          connection.execute("CREATE TABLE #{versions} (tag_id BIGINT PRIMARY KEY, version BIGINT NOT NULL)")
          connection.execute("CREATE TABLE #{log} (id BIGINT AUTO_INCREMENT PRIMARY KEY, created_at BIGINT NOT NULL, " \
            "tag_id BIGINT NULL, `key` VARBINARY(1024) NULL)")
        end
      end

      def drop(connection, table_name)
        %w[_versions _log].each { |suffix| connection.execute("DROP TABLE IF EXISTS #{connection.quote_table_name("#{table_name}#{suffix}")}") }
      end
    end
  end
end
