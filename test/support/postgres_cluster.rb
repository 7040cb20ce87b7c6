# frozen_string_literal: true

require "securerandom"
require "support/scripted_server"

module Strata
  module TestSupport
    # PostgreSQL for the SQL tier's tests. bin/test starts one shared server and exports its URL as
    # STRATA_POSTGRES_URL; a test that stops a server starts a throwaway cluster of its own here,
    # through script/postgres (which bounds every wait).
    class PostgresCluster < ScriptedServer
      SCRIPT = File.expand_path("../../script/postgres", __dir__)
      ENV_URL = "STRATA_POSTGRES_URL"

      # The PostgreSQL tests run against real servers, as the memcached ones do: without one they
      # fail with the way to get one, never skip.
      MISSING_URL = "STRATA_POSTGRES_URL is not set: bin/test starts PostgreSQL and sets it " \
        "(or run script/postgres start DIR PORT and export the URL it prints)"
      NOT_INSTALLED = "PostgreSQL is not installed (/usr/lib/postgresql/*/bin): bin/test installs it"

      # Raises unless Debian's PostgreSQL server binaries are here, so a test can start a cluster.
      def self.require_installed!
        return if !Dir["/usr/lib/postgresql/*/bin/pg_ctl"].empty? || !ENV["STRATA_POSTGRES_BIN"].to_s.empty?

        raise NOT_INSTALLED
      end

      # Connects record_class to a schema of its own (named prefix and random hex, made here) on
      # the shared server, as its search path; the schema's name. drop_schema drops it.
      def self.connect_to_new_schema(record_class, prefix)
        schema = "#{prefix}_#{SecureRandom.hex(4)}"
        record_class.establish_connection(url)
        record_class.connection_pool.with_connection { |c| c.execute("CREATE SCHEMA #{schema}") }
        record_class.establish_connection("#{url}?schema_search_path=#{schema}&min_messages=warning")
        schema
      end

      # Drops schema (with everything in it) and disconnects record_class.
      def self.drop_schema(record_class, schema)
        record_class.connection_pool.with_connection { |c| c.execute("DROP SCHEMA #{schema} CASCADE") }
        record_class.remove_connection
      end

      # initdb, start and create the database; the URL.
      def start
        self.class.require_installed!
        super
      end
    end
  end
end
