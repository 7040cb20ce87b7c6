# frozen_string_literal: true

require "support/scripted_server"

module Strata
  module TestSupport
    # MariaDB for the SQL tier's tests. bin/test starts one shared server (script/mariadb) and
    # exports its URL as STRATA_MARIADB_URL; a test that kills a server starts one of its own here,
    # through script/mariadb (which bounds every wait; crash is a SIGKILL).
    class MariaDBServer < ScriptedServer
      SCRIPT = File.expand_path("../../script/mariadb", __dir__)
      ENV_URL = "STRATA_MARIADB_URL"

      # The MariaDB tests run against a real server, as the PostgreSQL ones do: without one they
      # fail with the way to get one, never skip.
      MISSING_URL = "STRATA_MARIADB_URL is not set: bin/test starts MariaDB and sets it " \
        "(or run script/mariadb start DIR PORT and export the URL it prints)"
    end
  end
end
