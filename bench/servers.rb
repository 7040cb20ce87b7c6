# frozen_string_literal: true

# The tests' own server processes (bounded waits, free loopback ports): the bench starts the same.
$LOAD_PATH.unshift(File.expand_path("../test", __dir__))
require "support/postgres_cluster"

module Strata
  module Bench
    # The servers a run starts for itself, so that bin/bench on a fresh machine (where script/setup
    # installed memcached and PostgreSQL, and nothing runs) measures every store and report:
    #
    # - memcached, when STRATA_MEMCACHED is not set: one server with its default memory (64 MiB),
    #   as the README's run had;
    # - PostgreSQL (script/postgres, a cluster in a scratch directory), when STRATA_POSTGRES_URL is
    #   not set and the run includes the cross-host staleness report.
    #
    # Each listens on 127.0.0.1 on a free port, through the tests' MemcachedProcess and
    # PostgresCluster; the run sees it through the variable, as it would a server of the user's,
    # and #stop stops it and removes its files. A variable that is set, even empty, is the user's
    # choice: STRATA_MEMCACHED= runs without memcached. A server that is not installed or does not
    # start is a note on err, and the run goes on without it.
    class Servers
      # Starts what is missing, yields, stops it.
      def self.around(postgres:, err:)
        servers = new(err)
        servers.start(postgres: postgres)
        yield
      ensure
        servers&.stop
      end

      def initialize(err)
        @err = err
        @started = {}
        @owner_pid = Process.pid
      end

      def start(postgres:)
        unless ENV.key?("STRATA_MEMCACHED")
          memcached = TestSupport::MemcachedProcess.new
          launch("STRATA_MEMCACHED", "memcached (its default 64 MiB)", memcached, memcached.method(:kill), &:server)
        end
        return unless postgres && !ENV.key?("STRATA_POSTGRES_URL")

        postgres = TestSupport::PostgresCluster.new
        launch("STRATA_POSTGRES_URL", "PostgreSQL", postgres, postgres.method(:destroy), &:url)
      end

      # Bounded by the servers' own bounds. A forked child that leaves through this method's
      # caller stops nothing: the servers are the run's.
      def stop
        return unless Process.pid == @owner_pid

        @started.each do |name, stopper|
          stopper.call
          ENV.delete(name)
        end
        @started.clear
      end

      private

      # Starts server and names it in ENV[name] (the block gives its address), for stopper to stop
      # at the end; a note either way.
      def launch(name, what, server, stopper)
        server.start
        @started[name] = stopper
        ENV[name] = yield(server)
        @err.puts("bin/bench: started #{what} at #{ENV[name]} for this run")
      rescue => e
        stopper.call
        @err.puts("bin/bench: no #{what} of its own: #{e.message.lines.first&.strip} (script/setup installs it)")
      end
    end
  end
end
