# frozen_string_literal: true

require "minitest/autorun"
require "socket"
require "stringio"
require_relative "../../bench/servers"

# bin/bench on a fresh machine starts the servers nobody named (bench/servers.rb): real memcached
# and PostgreSQL processes on loopback, stopped and removed when the block ends.
class BenchServersTest < Minitest::Test
  NAMES = %w[STRATA_MEMCACHED STRATA_POSTGRES_URL].freeze

  def setup
    @saved = NAMES.to_h { |name| [name, ENV[name]] }
    NAMES.each { |name| ENV.delete(name) }
    @err = StringIO.new
  end

  def teardown
    @saved.each { |name, value| value.nil? ? ENV.delete(name) : ENV[name] = value }
  end

  def test_a_run_without_strata_memcached_gets_a_memcached_of_its_own_until_it_ends
    server = nil
    Strata::Bench::Servers.around(postgres: false, err: @err) do
      server = ENV.fetch("STRATA_MEMCACHED")
      assert_equal ["HD\r\n", "VA 2\r\n", "ok\r\n"], set_and_get(server)
      assert_nil ENV["STRATA_POSTGRES_URL"]
    end

    assert_match(/started memcached .* at #{Regexp.escape(server)}/, @err.string)
    assert_nil ENV["STRATA_MEMCACHED"]
    assert_raises(Errno::ECONNREFUSED) { connect(server).close }
  end

  # Raised in a forked child to leave Servers.around through its ensure.
  ChildLeft = Class.new(StandardError)

  def test_a_forked_child_that_leaves_the_block_stops_nothing
    Strata::Bench::Servers.around(postgres: false, err: @err) do
      pid = fork
      raise ChildLeft if pid.nil?

      Process.wait(pid)
      assert_predicate Process.last_status, :success?
      assert_equal ["HD\r\n", "VA 2\r\n", "ok\r\n"], set_and_get(ENV.fetch("STRATA_MEMCACHED"))
    end
  rescue ChildLeft
    exit!(0)
  end

  def test_a_variable_that_is_set_even_empty_is_left_alone
    ENV["STRATA_MEMCACHED"] = ""
    Strata::Bench::Servers.around(postgres: false, err: @err) { assert_equal "", ENV["STRATA_MEMCACHED"] }

    assert_equal "", ENV["STRATA_MEMCACHED"]
    assert_empty @err.string
  end

  def test_the_staleness_report_gets_a_postgresql_of_its_own_until_the_run_ends
    require "pg"
    ENV["STRATA_MEMCACHED"] = ""
    url = nil
    Strata::Bench::Servers.around(postgres: true, err: @err) do
      url = ENV.fetch("STRATA_POSTGRES_URL")
      connection = PG.connect(url)
      assert_equal "1", connection.exec("SELECT 1 AS one").getvalue(0, 0)
      connection.close
    end

    assert_nil ENV["STRATA_POSTGRES_URL"]
    assert_raises(PG::ConnectionBad) { PG.connect(url, connect_timeout: 2) }
  end

  private

  def connect(server)
    host, port = server.split(":")
    Socket.tcp(host, Integer(port), connect_timeout: 1)
  end

  # A meta set then get of one key: memcached's three answer lines.
  def set_and_get(server)
    socket = connect(server)
    socket.write("ms bench:servers 2 T10\r\nok\r\nmg bench:servers v\r\n")
    Array.new(3) { socket.readline }
  ensure
    socket&.close
  end
end
