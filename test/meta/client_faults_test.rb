# frozen_string_literal: true

require "test_helper"
require "securerandom"
require "socket"
require "strata/meta"
require "support/child_processes"
require "support/waiting"
require "support/memcached_process"
require "support/memcached_helpers"

# Meta::Client when servers die, hang or the process forks. Every call must end within its
# deadline; a dead server routes to the gutter and comes back after retry_after.
class MetaClientFaultsTest < Minitest::Test
  include Strata::Waiting
  include Strata::TestSupport::ChildProcesses
  include Strata::TestSupport::MemcachedHelpers

  TIMEOUT = 0.3
  CONNECT_TIMEOUT = 0.3
  RETRY_AFTER = 0.2
  # What one call may take at most: handshake plus exchange, and scheduling slack.
  CALL_BOUND = CONNECT_TIMEOUT + TIMEOUT + 1.0
  DEADLINE = 10

  def setup
    @prefix = "faults-#{SecureRandom.hex(6)}-"
    @processes = []
  end

  def teardown
    @processes.each(&:kill)
  end

  def test_killed_server_fails_fast_routes_to_gutter_and_recovers_after_restart
    doomed = spawn_memcached
    survivor = spawn_memcached
    client = new_client([doomed.server, survivor.server])
    key = key_on(client, doomed.server)
    assert client.set(key, "before")

    doomed.kill
    before = Time.now
    error = assert_within(CALL_BOUND) { assert_raises(Strata::TierError) { client.get(key) } }
    refute_kind_of Strata::ValueTooLargeError, error
    assert_equal doomed.server, error.server, "the error names the server, for the store's one report per outage"
    refute client.ring.up?(doomed.server)
    stats = client.stats
    assert_equal({doomed.server => 1, survivor.server => 0}, stats[:errors])
    assert_equal [doomed.server], stats[:down_since].keys
    assert_operator stats[:down_since][doomed.server], :>=, before
    assert_equal [survivor.server, :gutter], client.ring.route(key)
    assert client.set(key, "in gutter", ttl: 300), "writes go to the gutter"
    assert_equal "in gutter", client.get(key)

    doomed.start
    # Route first: a set made while the key still went to the gutter, followed by the retry delay
    # running out, would count as recovered with "after" on the wrong server.
    recovered = wait_until(DEADLINE) do
      client.ring.route(key) == [doomed.server, :primary] && client.set(key, "after")
    rescue Strata::TierError
      false # marked down again until the next retry_after
    end
    assert recovered, "the restarted server should take its keys back"
    assert_equal "after", client.get(key)
    assert_empty client.stats[:down_since], "the outage ended when the server answered"
  ensure
    client&.close
  end

  # A server out of memory (2 MB, -M: refuse rather than evict) answers SERVER_ERROR to an ms in
  # a quiet batch, and that reply carries no opaque: the whole batch of that server counts as
  # failed, the other server's results come back, and both connections stay in step.
  def test_set_multi_with_a_server_error_in_the_batch
    # One worker thread: memcached counts a connection in the worker it hands it to, so with
    # several the readiness probe's connection could be counted after the baseline below.
    full = spawn_memcached(options: %w[-m 2 -M -t 1])
    healthy = spawn_memcached
    client = new_client([full.server, healthy.server])
    big = "x" * 100_000
    on_full = keys_on(client, full.server, "full-")
    filled = on_full.drop(3).any? do |k| # bound: 2 MB fills long before the keys run out
      client.set(k, big)
      false
    rescue Strata::Meta::ServerError
      true
    end
    assert filled, "the 2 MB server should run out of memory"
    refused = on_full.take(3)
    kept = key_on(client, healthy.server)

    error = assert_raises(Strata::PartialError) { client.set_multi(refused.to_h { |k| [k, big] }.merge(kept => big)) }
    assert_kind_of Strata::Meta::ServerError, error.cause
    assert_equal({kept => true}, error.result)
    assert_equal big, client.get(kept)
    assert client.ring.up?(full.server), "a server that answered is not marked down"
    assert_nil client.get(on_full.last), "its connection is still in step"
  ensure
    client&.close
  end

  # The same refusal to one set: the server read the value and answered, so the connection is
  # kept (it was closed, and every refusal cost a reconnect).
  def test_a_server_error_to_a_set_keeps_the_connection
    # One worker thread: memcached counts a connection in the worker it hands it to, so with
    # several the readiness probe's connection could be counted after the baseline below.
    full = spawn_memcached(options: %w[-m 2 -M -t 1])
    # Generous timeouts: on a loaded machine a slow connect or reply would cost a connection,
    # which is not what this test is about.
    client = new_client([full.server], pool_size: 1, timeout: 10, connect_timeout: 10, pool_timeout: 10)
    big = "x" * 100_000
    connections = server_stat(full.server, "total_connections")
    error = (0...100).each do |i| # bound: 2 MB fills long before 100 values of 100 KB
      client.set("#{@prefix}fill#{i}", big)
    rescue Strata::Meta::ServerError => e
      break e
    end
    assert_kind_of Strata::Meta::ServerError, error, "the 2 MB server should run out of memory"
    assert_equal full.server, error.server
    assert_nil client.get("#{@prefix}absent")
    assert client.ring.up?(full.server)
    # + 1: the connection that asks this time.
    assert_equal connections + 1 + 1, server_stat(full.server, "total_connections"), "one client connection throughout"
  ensure
    client&.close
  end

  # A value over the item size limit is refused before it is sent (set_multi did so already;
  # a single set sent all of it for the server to throw away), and the key's old copy goes.
  def test_a_set_over_the_item_size_limit_is_not_sent
    server = spawn_memcached
    client = new_client([server.server])
    key = "#{@prefix}big"
    assert client.set(key, "old")
    read_before = server_stat(server.server, "bytes_read")

    error = assert_raises(Strata::ValueTooLargeError) { client.set(key, "x" * (2 * 1024 * 1024)) }
    assert_includes error.message, "item size limit"
    assert_operator server_stat(server.server, "bytes_read") - read_before, :<, 1024, "the value was not sent"
    assert_nil client.get(key), "the old copy is gone, as when memcached refuses a value"
    assert client.add(key, "small")
    assert_raises(Strata::ValueTooLargeError) { client.add(key, "x" * (2 * 1024 * 1024)) }
    assert_equal "small", client.get(key), "an add would not have replaced it: it stays"
  ensure
    client&.close
  end

  # Every call while the only server is down fails at once with the same server named, and the
  # stats count each of them.
  def test_with_no_server_up_each_call_names_the_server_and_is_counted
    doomed = spawn_memcached
    client = new_client([doomed.server], retry_after: 60)
    assert_nil client.get("#{@prefix}k")
    doomed.kill

    errors = Array.new(3) { assert_raises(Strata::TierError) { client.get("#{@prefix}k") } }
    assert_equal [doomed.server] * 3, errors.map(&:server)
    assert_match(/no memcached server is up/, errors.last.message)
    assert_equal({doomed.server => 3}, client.stats[:errors])
    assert_equal [doomed.server], client.stats[:down_since].keys
  ensure
    client&.close
  end

  def test_multi_key_calls_keep_the_healthy_servers_answers_when_one_dies
    doomed = spawn_memcached
    survivor = spawn_memcached
    client = new_client([doomed.server, survivor.server])
    lost = key_on(client, doomed.server)
    kept = key_on(client, survivor.server)
    assert_equal({lost => true, kept => true}, client.set_multi({lost => "a", kept => "b"}))

    doomed.kill
    error = assert_within(CALL_BOUND) { assert_raises(Strata::PartialError) { client.get_multi([lost, kept]) } }
    assert_equal({kept => "b"}, error.result)
    assert_kind_of Strata::TierError, error, "callers that know only TierError still fail open"

    # The doomed server is marked down now: its keys route to the survivor as a gutter.
    assert_equal({lost => true, kept => true}, client.set_multi({lost => "c", kept => "d"}))
    assert_equal({lost => "c", kept => "d"}, client.get_multi([lost, kept]))
  ensure
    client&.close
  end

  def test_a_server_killed_mid_run_never_hangs_a_call
    server = spawn_memcached
    client = new_client([server.server])
    keys = Array.new(20) { |i| "#{@prefix}k#{i}" }
    keys.each { |k| client.set(k, "v") }
    server.kill
    keys.each do |k|
      assert_within(CALL_BOUND) do
        assert_raises(Strata::TierError) { client.get(k) }
      end
    end
  ensure
    client&.close
  end

  def test_blackhole_server_answers_every_call_within_its_deadline
    blackhole = TCPServer.new("127.0.0.1", 0) # listens, never accepts, never answers
    server = "127.0.0.1:#{blackhole.addr[1]}"
    client = new_client([server], retry_after: 0)
    key = "#{@prefix}hole"
    calls = [
      -> { client.get(key) }, -> { client.set(key, "v") }, -> { client.get_multi([key, "#{key}2"]) },
      -> { client.delete(key) }, -> { client.incr(key, 1, initial: 0) }, -> { client.lease_get(key, lease_ttl: 5) },
      -> { client.invalidate(key, grace_ttl: 5) }
    ]
    calls.each do |call|
      error = assert_within(CALL_BOUND) { assert_raises(Strata::TierError) { call.call } }
      assert_equal server, error.server
    end
  ensure
    client&.close
    blackhole&.close
  end

  def test_fork_after_use_child_and_parent_both_work
    client = new_client(Strata::TestSupport.memcached_servers)
    key = "#{@prefix}fork"
    assert client.set(key, "parent")
    pid = fork_child do
      client.get(key) == "parent" && client.set(key, "child") && client.get(key) == "child"
    end
    status = reap(pid, DEADLINE)
    kill_and_reap(pid, DEADLINE) unless status
    assert status&.success?, "child failed: #{status.inspect}"
    assert_equal "child", client.get(key)
    assert client.set(key, "parent again")
    assert_equal "parent again", client.get(key)
  ensure
    client&.close
  end

  private

  def spawn_memcached(options: [])
    process = Strata::TestSupport::MemcachedProcess.new(options: options)
    @processes << process
    process.start
  end

  def new_client(servers, **options)
    Strata::Meta::Client.new(servers: servers, timeout: TIMEOUT, connect_timeout: CONNECT_TIMEOUT,
      retry_after: RETRY_AFTER, pool_timeout: TIMEOUT, **options)
  end

  # Runs the block and fails unless it returned within seconds; returns the block's value.
  def assert_within(seconds)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    result = yield
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    assert_operator elapsed, :<=, seconds, "took #{elapsed.round(3)}s"
    result
  end
end
