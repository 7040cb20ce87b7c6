# frozen_string_literal: true

require "minitest/autorun"
require "json"
require_relative "support/demo_server"
require_relative "../../test/support/waiting"

# The HTTP tests (docs/demo.md): requests over real connections to the demo app under Puma with
# 2 workers, started once per process (STRATA_DEMO_DATABASE: sqlite, the default, or postgres
# on STRATA_POSTGRES_URL's server) and stopped after the last test. The app runs with L1 over
# the SQL tier in its database, without memcached, so that a hit the SQL tier can't explain
# comes from L1. bin/demo test runs them on SQLite, then on PostgreSQL when the URL is set.
#
# The tests share the server and its 300 bugs, each on bugs of its own, so that what one caches
# or changes is no other's: tags 1-50, redaction 51-150, shared L1 151-225 and 290, freshness
# 226-275, conditional GET 276-289, under load 291-294 (and project 9), errors 299.
module DemoHTTP
  DATABASE = ENV.fetch("STRATA_DEMO_DATABASE", "sqlite").to_sym

  BOOT = Mutex.new

  class << self
    # The running server; a boot that failed fails every test with its error, once. One boot
    # whatever the threads asking (a test's readers may be the first).
    def server
      BOOT.synchronize do
        raise @boot_error if @boot_error

        @server ||= DemoServer.new(database: DATABASE).start
      rescue => error
        @boot_error = error
        raise
      end
    end

    def stop
      @server&.stop
    end
  end

  Minitest.after_run { DemoHTTP.stop }

  class Test < Minitest::Test
    include Strata::Waiting

    # How long a raw SQL change may take to reach the workers: the host's poller reads the
    # triggers' log rows within poll_interval (0.05 s; at once on PostgreSQL's NOTIFY; SQLite's
    # raw tag rows take one more round to become log rows), or within its lease (1 s) when the
    # poller's process changes; this is that with room for a loaded machine.
    RAW_SQL_BOUND = 5

    private

    def server
      DemoHTTP.server
    end

    # The block's response from each worker in turn (the others stopped meanwhile), checked to
    # come from that worker with status code.
    def on_each_worker(code: "200")
      server.worker_pids.map do |pid|
        response = server.on_worker(pid) { yield }
        assert_equal code, response.code, response.body
        assert_equal pid.to_s, response["X-Worker-Pid"], "the request went to another worker"
        response
      end
    end

    def json(response)
      JSON.parse(response.body)
    end

    # The entry of bug id in a collection response.
    def entry_in(response, id)
      json(response).fetch("entries").find { |entry| entry["id"] == id } || flunk("bug #{id} is not in the page")
    end
  end
end
