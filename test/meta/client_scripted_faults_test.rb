# frozen_string_literal: true

require "test_helper"
require "strata/meta"
require "support/scripted_memcached"
require "support/waiting"

# Meta::Client against replies no healthy memcached sends, from a scripted server: a value
# without its opaque or with one out of range (the stream is out of step: the connection goes and
# the batch's keys miss), SERVER_ERROR anywhere (the server is still in step: the connection
# stays), and a server found down while a call waited for its connection.
class MetaClientScriptedFaultsTest < Minitest::Test
  include Strata::Waiting

  def teardown
    @client&.close
    @scripted&.stop
  end

  # The reply to the mg of "b" comes without an opaque: it must not be taken for "a"'s.
  def test_a_value_without_its_opaque_is_no_keys_and_drops_the_connection
    start { |line| "VA 6 t-1\r\nfrom-b\r\n" if line.start_with?("mg b ") }

    error = assert_raises(Strata::Meta::ProtocolError) { @client.get_multi(%w[a b]) }
    assert_equal @scripted.server, error.server
    assert_includes error.message, @scripted.server
    assert @client.ring.up?(@scripted.server), "it answered: not marked down"
    assert_equal 1, @scripted.connections

    assert_nil @client.get("a")
    assert_equal 2, @scripted.connections, "the stream was out of step: a new connection"
  end

  # Out of range, on the fast path (VA <n> O<i> and nothing else) and the full parse, and not a
  # number: each raised IndexError out of the client, or was credited to the first key.
  def test_an_opaque_out_of_range_or_not_a_number_is_a_protocol_error
    replies = ["VA 3 O2\r\nbad\r\n", "VA 3 O9 t-1\r\nbad\r\n", "VA 3 Ox\r\nbad\r\n", "VA 3 O-1\r\nbad\r\n"]
    reply = nil
    start { |line| reply if line.start_with?("mg b ") }
    replies.each do |bad|
      reply = bad
      error = assert_raises(Strata::Meta::ProtocolError, bad.inspect) { @client.get_multi(%w[a b]) }
      assert_equal @scripted.server, error.server
    end
  end

  # With a healthy server beside it: the other server's answers come back, none of the broken
  # batch's, not even the hit that came with a good opaque before the bad reply.
  def test_a_hit_before_the_bad_reply_is_dropped_with_the_batch
    healthy = Strata::TestSupport.memcached_servers.first
    start(servers: [healthy]) do |line|
      if line.start_with?("mg sa") then "VA 1 O0\r\nA\r\n"
      elsif line.start_with?("mg sb") then "VA 1\r\nB\r\n"
      end
    end
    sa, sb = %w[sa sb].map { |prefix| key_on(prefix, @scripted.server) }
    kept = key_on("kept", healthy)
    assert @client.set(kept, "K")

    error = assert_raises(Strata::PartialError) { @client.get_multi([sa, sb, kept]) }
    assert_equal({kept => "K"}, error.result)
    assert_kind_of Strata::Meta::ProtocolError, error.cause
    assert_equal @scripted.server, error.server
  ensure
    @client&.delete(kept) if kept
  end

  # A quiet ms refused with an opaque that names no entry: before, "NS Ox" counted as a refusal
  # of the first entry.
  def test_a_quiet_refusal_that_names_no_entry_is_a_protocol_error
    start { |line| "NS Ox\r\n" if line.start_with?("ms b ") }

    assert_raises(Strata::Meta::ProtocolError) { @client.set_multi({"a" => "1", "b" => "2"}) }
  end

  # The server answers SERVER_ERROR in place of one reply and the rest as usual: the call fails,
  # and the connection is still in step, so it is kept.
  def test_server_errors_keep_the_connection
    start do |line|
      case line
      when /\Ams oom / then "SERVER_ERROR out of memory storing object\r\n"
      when /\Amg oom / then "SERVER_ERROR out of memory\r\n"
      when /\Ama oom / then "SERVER_ERROR out of memory\r\n"
      end
    end

    calls = {
      set: -> { @client.set("oom", "v") }, lease_get: -> { @client.lease_get("oom", lease_ttl: 5) },
      incr: -> { @client.incr("oom", 1, initial: 1) }, get_multi: -> { @client.get_multi(%w[a oom b]) },
      set_multi: -> { @client.set_multi({"a" => "1", "oom" => "2", "b" => "3"}) },
      cas_of: -> { @client.cas_of("oom") }, cas_multi: -> { @client.cas_multi(%w[a oom b]) }
    }
    calls.each do |name, call|
      error = assert_raises(Strata::Meta::ServerError, name.to_s) { call.call }
      assert_equal @scripted.server, error.server, name.to_s
      assert_nil @client.get("ok"), name.to_s
    end
    assert_equal 1, @scripted.connections, "one connection served every call"
    assert @client.ring.up?(@scripted.server)
    assert_equal calls.size, @client.stats[:errors][@scripted.server]
  end

  # "object too large" from the server (a limit the probe did not see) is ValueTooLargeError,
  # and the connection stays too.
  def test_object_too_large_from_the_server_keeps_the_connection
    start { |line| "SERVER_ERROR object too large for cache\r\n" if line.start_with?("ms big ") }

    assert_raises(Strata::ValueTooLargeError) { @client.set("big", "v") }
    assert_nil @client.get("ok")
    assert_equal 1, @scripted.connections
  end

  # A call that waited for the connection while another call on it found the server gone must
  # not try the server again: it fails at once, without a request.
  def test_a_call_that_waited_for_the_connection_sees_the_server_marked_down
    start(pool_size: 1, pool_timeout: 5, timeout: 5, retry_after: 60) { |line| :hold if line.start_with?("mg held ") }
    assert_nil @client.get("warm") # probed and pooled

    holder = Thread.new { capture { @client.get("held") } }
    assert wait_until { @scripted.commands.include?("mg held v") }, "the first call is under way"
    waiter = Thread.new { capture { @client.get("other") } }
    assert wait_until { waiter.status == "sleep" }, "the second call waits for the connection"
    @scripted.release(:close)

    assert_kind_of Strata::TierError, holder.value
    error = waiter.value
    assert_kind_of Strata::TierError, error
    assert_equal @scripted.server, error.server
    assert_match(/marked down after this call chose it/, error.message)
    refute_includes @scripted.commands, "mg other v"
  end

  # No free connection within pool_timeout is a RetryableError naming the server, never the
  # pool's own error (ResourcePool::TimeoutError), and the server is not marked down for it.
  def test_no_free_connection_is_a_retryable_error_and_the_server_stays_up
    start(pool_size: 1, pool_timeout: 0.05, timeout: 5) { |line| :hold if line.start_with?("mg held ") }
    assert_nil @client.get("warm") # probed and pooled

    holder = Thread.new { capture { @client.get("held") } }
    assert wait_until { @scripted.commands.include?("mg held v") }, "the one connection is in use"
    error = assert_raises(Strata::RetryableError) { @client.get("other") }
    assert_equal @scripted.server, error.server
    assert_match(/no free connection/, error.message)
    assert @client.ring.up?(@scripted.server)
    @scripted.release(:close)
    assert_kind_of Strata::TierError, holder.value
  end

  private

  # Starts the scripted server (replies from script) and a client of it and of servers.
  def start(servers: [], **options, &script)
    @scripted = Strata::TestSupport::ScriptedMemcached.new { |line, _data| script.call(line) }.start
    @client = Strata::Meta::Client.new(servers: [@scripted.server, *servers], timeout: 2, **options)
  end

  # A key starting with prefix that the ring puts on server (bound: 10,000 candidates).
  def key_on(prefix, server)
    (0...10_000).map { |i| "#{prefix}#{i}" }.find { |key| @client.ring.server_for(key) == server } || flunk("no key on #{server}")
  end

  # The error the block raised, or its value.
  def capture
    yield
  rescue => e
    e
  end
end
