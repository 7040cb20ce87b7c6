# frozen_string_literal: true

require "open3"
require "tmpdir"
require "fileutils"
require "support/memcached_process"

module Strata
  module TestSupport
    # PostgreSQL for the SQL tier's tests. bin/test starts one shared server and exports its URL as
    # STRATA_POSTGRES_URL; a test that stops a server starts a throwaway cluster of its own here,
    # through script/postgres (which bounds every wait).
    class PostgresCluster
      SCRIPT = File.expand_path("../../script/postgres", __dir__)

      # The shared server's URL; raises MISSING_URL when none was started.
      def self.url
        url = ENV["STRATA_POSTGRES_URL"]
        raise MISSING_URL if url.nil? || url.empty?

        url
      end

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

      attr_reader :port, :url

      def initialize(port = MemcachedProcess.free_port)
        @port = port
        @dir = nil
        @url = nil
      end

      # initdb, start and create the database; the URL.
      def start
        self.class.require_installed!
        @dir = Dir.mktmpdir("strata-pg-fault")
        @url = script("start", @dir, @port.to_s).strip
      end

      # Stops the server at once, as a crash would; its files stay for #restart.
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
        raise "script/postgres #{args.first} failed: #{err}" unless status.success?

        out
      end
    end
  end
end
