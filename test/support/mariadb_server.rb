# frozen_string_literal: true

module Strata
  module TestSupport
    # MariaDB for the SQL tier's tests: bin/test starts one server (script/mariadb) and exports its
    # URL as STRATA_MARIADB_URL.
    module MariaDBServer
      # The MariaDB tests run against a real server, as the PostgreSQL ones do: without one they
      # fail with the way to get one, never skip.
      MISSING_URL = "STRATA_MARIADB_URL is not set: bin/test starts MariaDB and sets it " \
        "(or run script/mariadb start DIR PORT and export the URL it prints)"

      def self.url
        url = ENV["STRATA_MARIADB_URL"]
        raise MISSING_URL if url.nil? || url.empty?

        url
      end
    end
  end
end
