# frozen_string_literal: true

require "open3"
require "tmpdir"
require "support/memcached_process"

module Strata
  module TestSupport
    # MariaDB for the SQL tier's tests. bin/test starts one shared server (script/mariadb) and
    # exports its URL as STRATA_MARIADB_URL; a test that kills a server starts one of its own here,
    # through script/mariadb (which bounds every wait).
    class MariaDBServer
      SCRIPT = File.expand_path("../../script/mariadb", __dir__)

      # The MariaDB tests run against a real server, as the PostgreSQL ones do: without one they
      # fail with the way to get one, never skip.
      MISSING_URL = "STRATA_MARIADB_URL is not set: bin/test starts MariaDB and sets it " \
        "(or run script/mariadb start DIR PORT and export the URL it prints)"

      # The shared server's URL; raises MISSING_URL when none was started.
      def self.url
        url = ENV["STRATA_MARIADB_URL"]
        raise MISSING_URL if url.nil? || url.empty?

        url
      end

      attr_reader :port, :url

      def initialize(port = MemcachedProcess.free_port)
        @port = port
        @dir = nil
        @url = nil
      end

      # Makes a data directory, starts the server and creates the database; the URL.
      def start
        @dir = Dir.mktmpdir("strata-mariadb-fault")
        @url = script("start", @dir, @port.to_s).strip
      end

      # Kills the server (SIGKILL); its files stay for #restart.
      def crash
        script("crash", @dir)
      end

      def restart
        script("restart", @dir, @port.to_s)
      end

      # Stops the server (if it runs) and removes its files. Safe to call twice.
      def destroy
        return unless @dir

        script("stop", @dir)
        @dir = nil
      end

      private

      def script(*args)
        out, err, status = Open3.capture3(SCRIPT, *args)
        raise "script/mariadb #{args.first} failed: #{err}" unless status.success?

        out
      end
    end
  end
end
