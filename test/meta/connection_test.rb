# frozen_string_literal: true

require "test_helper"
require "timeout"
require "strata/meta/connection"
require "strata/meta/client"
require "support/child_processes"

# Strata::Meta::Connection against the memcached servers bin/test starts, and against local
# listeners that never answer or refuse. Every wait is bounded by a connection deadline, a
# Timeout, or a reap deadline.
class MetaConnectionTest < Minitest::Test
  include Strata::TestSupport::TrackedChildren

  Connection = Strata::Meta::Connection

  # Seconds any single wait in these tests may take before the test fails instead of hanging.
  DEADLINE = 10

  def setup
    @pids = []
    @listeners = []
    host, port = Strata::TestSupport.memcached_servers.first.split(":")
    @conn = Connection.new(host, port, timeout: 2.0)
    @prefix = "strata-conn-test:#{Process.pid}:#{name}:"
  end

  def teardown
    kill_tracked_children
    @conn&.close
    @listeners.each(&:close)
  end

  def key(suffix)
    "#{@prefix}#{suffix}"
  end

  def set(conn, key, value)
    conn.request do |c|
      c.write("ms #{key} #{value.bytesize} T60\r\n", value, "\r\n")
      assert_equal "HD", c.read_line
    end
  end

  def get(conn, key)
    conn.request do |c|
      c.write("mg #{key} v\r\n")
      header = c.read_line
      next nil if header == "EN"

      c.read_bytes(Integer(header.split(" ")[1]))
    end
  end

  def noop(conn)
    conn.request do |c|
      c.write("mn\r\n")
      c.read_line
    end
  end

  # A listener whose backlog completes handshakes but that never reads or answers.
  def blackhole
    server = TCPServer.new("127.0.0.1", 0)
    @listeners << server
    Connection.new("127.0.0.1", server.addr[1], timeout: 0.2, connect_timeout: 0.5)
  end

  def test_round_trip
    assert_equal "MN", noop(@conn)
    assert @conn.connected?
  end

  def test_value_round_trip_small_and_large
    small = "é binary \x00\xFF".b
    large = Random.new(1).bytes(300_000)
    set(@conn, key("small"), small)
    set(@conn, key("large"), large)
    assert_equal small, get(@conn, key("small"))
    assert_equal large, get(@conn, key("large"))
    assert_nil get(@conn, key("missing"))
  end

  def test_blackhole_every_call_raises_retryable
    conn = blackhole
    3.times do # a fresh socket each time (the last request was cut short), and each one times out
      error = assert_raises(Strata::RetryableError) { noop(conn) }
      assert_match(/127\.0\.0\.1:\d+ timed out after 0\.2s/, error.message)
      refute conn.connected?, "a timed-out request closes its socket"
    end
  end

  def test_blackhole_write_that_never_drains_raises_retryable
    conn = blackhole
    big = "x" * (32 << 20) # more than the kernel buffers on both ends hold
    assert_raises(Strata::RetryableError) { conn.request { |c| c.write("ms k #{big.bytesize}\r\n", big) } }
  end

  def test_unread_reply_is_not_read_by_the_next_request
    set(@conn, key("a"), "alpha")
    set(@conn, key("b"), "beta")
    assert_raises(RuntimeError) do
      @conn.request do |c|
        c.write("mg #{key("a")} v\r\n")
        c.flush
        raise "interrupted before reading"
      end
    end
    assert_equal "beta", get(@conn, key("b"))
  end

  def test_timeout_interrupt_mid_read_is_not_read_by_the_next_request
    set(@conn, key("a"), "alpha")
    set(@conn, key("b"), "beta")
    port_before = @conn.local_port
    assert_raises(Timeout::Error) do
      Timeout.timeout(0.2) do
        @conn.request do |c|
          c.write("mg #{key("a")} v\r\nmg #{key("a")} v\r\n")
          c.read_line
          c.read_bytes(1 << 20) # more than will ever come: blocks until Timeout interrupts it
        end
      end
    end
    assert_equal "beta", get(@conn, key("b"))
    refute_equal port_before, @conn.local_port, "the interrupted socket was replaced"
  end

  def test_fork_child_reconnects_and_parent_keeps_its_socket
    assert_equal "MN", noop(@conn)
    parent_port = @conn.local_port
    reader, writer = IO.pipe
    pid = fork_tracked do
      reader.close
      ok = noop(@conn) == "MN"
      writer.write(@conn.local_port.to_s)
      writer.close
      ok
    end
    writer.close
    assert IO.select([reader], nil, nil, DEADLINE), "child reported within #{DEADLINE}s"
    child_port = Integer(reader.read)
    status = reap_child(pid)
    assert status&.success?, "child exited 0 (#{status.inspect})"
    refute_equal parent_port, child_port, "the child opened its own socket"

    assert_equal "MN", noop(@conn)
    assert_equal parent_port, @conn.local_port, "the parent kept its socket"
  ensure
    reader&.close
  end

  def test_refused_raises_tier_error
    server = TCPServer.new("127.0.0.1", 0)
    port = server.addr[1]
    server.close
    conn = Connection.new("127.0.0.1", port)
    error = assert_raises(Strata::TierError) { noop(conn) }
    refute_kind_of Strata::RetryableError, error
    assert_includes error.message, "127.0.0.1:#{port}"
  end

  def test_server_closing_raises_tier_error
    server = TCPServer.new("127.0.0.1", 0)
    @listeners << server
    conn = Connection.new("127.0.0.1", server.addr[1], timeout: 2.0)
    error = assert_raises(Strata::TierError) do
      conn.request do |c|
        c.write("mn\r\n")
        c.flush
        server.accept.close # bounded: the handshake already sits in the backlog
        c.read_line
      end
    end
    refute_kind_of Strata::RetryableError, error
  end

  # A listener that answers each connection's first request with junk, then closes it.
  def junk_server(*replies)
    server = TCPServer.new("127.0.0.1", 0)
    @listeners << server
    thread = Thread.new do
      replies.each do |reply|
        client = server.accept
        client.readpartial(1024)
        client.write(reply)
        client.close
      end
    end
    [Connection.new("127.0.0.1", server.addr[1], timeout: 2.0), thread]
  end

  def test_a_stream_that_is_not_memcached_raises_tier_error
    conn, thread = junk_server("x" * 70_000, "VA 3\r\nabcXY", "VA 9999999999\r\n")
    error = assert_raises(Strata::TierError) { noop(conn) }
    assert_match(/line longer than/, error.message)
    error = assert_raises(Strata::TierError) do
      conn.request do |c|
        c.write("mg k v\r\n")
        c.read_bytes(Integer(c.read_line.split(" ")[1]))
      end
    end
    assert_match(/not followed by/, error.message)
    refute_kind_of Strata::RetryableError, error
    error = assert_raises(Strata::TierError) do # refused before any memory is set aside for it
      conn.request do |c|
        c.write("mg k v\r\n")
        c.read_bytes(Integer(c.read_line.split(" ")[1]))
      end
    end
    assert_match(/announced a data block of 9999999999 bytes/, error.message)
    refute conn.connected?
    assert thread.join(DEADLINE)
  end

  def test_timeouts_must_be_finite_seconds
    [0, -1, Float::INFINITY, nil, "1"].each do |bad|
      error = assert_raises(ArgumentError) { Connection.new("127.0.0.1", 1, timeout: bad) }
      assert_includes error.message, "timeout"
      assert_raises(ArgumentError) { Strata::Meta::Client.new(servers: ["127.0.0.1:1"], connect_timeout: bad) }
    end
  end

  def test_close_is_idempotent
    noop(@conn)
    @conn.close
    @conn.close
    refute @conn.connected?
    assert_equal "MN", noop(@conn)
  end

  def test_io_outside_request_is_refused
    wire = @conn.request { |c| c }
    assert_raises(Strata::Error) { wire.write("mn\r\n") }
    assert_raises(Strata::Error) { wire.read_line }
    assert_equal "MN", noop(@conn)
  end

  # 20,000 hits of 1 KiB with 240-byte keys: about 5 MiB of requests and 20 MiB of replies, more than
  # the loopback buffers hold. A client that wrote the whole batch before reading stalls here (checked
  # by disabling the drain in Wire#write): the server stops reading while its replies go unread.
  def test_big_pipelined_batch_completes_under_one_deadline
    value = "v" * 1024
    keys = Array.new(8) { |i| key("batch#{i}-").ljust(240, "k") }
    keys.each { |k| set(@conn, k, value) }
    n = 20_000
    conn = Connection.new(@conn.host, @conn.port, timeout: DEADLINE)
    hits = conn.request do |c|
      c.write(*Array.new(n) { |i| "mg #{keys[i % keys.size]} v q\r\n" }, "mn\r\n")
      count = 0
      loop do # bound: n hits, then MN
        line = c.read_line
        break if line == "MN"

        assert_equal "VA 1024", line
        assert_equal value, c.read_bytes(1024)
        count += 1
      end
      count
    end
    assert_equal n, hits
    assert_equal "MN", noop(conn)
  ensure
    conn&.close
  end
end
