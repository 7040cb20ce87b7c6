# frozen_string_literal: true

require "test_helper"
require "securerandom"
require "socket"
require "strata/meta"

# Request bytes built by Meta::Request, sent over a plain TCP socket to the first test memcached
# (Debian 12's 1.6.18 or Debian 13's 1.6.38), replies parsed by Meta::Response. Checks our
# reading of the protocol text against the server itself. Every read waits at most READ_TIMEOUT.
class MetaLiveProtocolTest < Minitest::Test
  Request = Strata::Meta::Request
  Response = Strata::Meta::Response

  READ_TIMEOUT = 5
  # memcached's default item size limit (-I 1m); bin/test does not change it.
  ITEM_SIZE_LIMIT = 1 << 20

  # A bare socket with a read buffer; the tests' stand-in for the real connection.
  class Wire
    def initialize(server)
      host, port = server.split(":")
      @socket = Socket.tcp(host, Integer(port), connect_timeout: READ_TIMEOUT)
      @buffer = String.new(encoding: Encoding::BINARY)
    end

    def write(*parts)
      parts.each { |part| @socket.write(part) }
    end

    # Reads one reply: the parsed line and, for VA, the value bytes.
    def reply(command = nil)
      result = Response.parse(read_line, command)
      value = read_value(result.value_length) if result.value?
      [result, value]
    end

    # Writes one request and reads its reply.
    def call(request, command, value = nil)
      value ? write(request, value, Request::CRLF) : write(request)
      reply(command)
    end

    def close
      @socket.close
    end

    private

    def read_line
      deadline = now + READ_TIMEOUT
      until (index = @buffer.index("\r\n"))
        fill(deadline)
      end
      line = @buffer.byteslice(0, index)
      @buffer = @buffer.byteslice(index + 2, @buffer.bytesize)
      line
    end

    # A data block of length bytes, after checking the "\r\n" that follows it.
    def read_value(length)
      block = read_exact(length + 2)
      raise "data block of #{length} bytes not followed by \\r\\n" unless block.end_with?("\r\n")

      block.byteslice(0, length)
    end

    def read_exact(length)
      deadline = now + READ_TIMEOUT
      fill(deadline) while @buffer.bytesize < length
      bytes = @buffer.byteslice(0, length)
      @buffer = @buffer.byteslice(length, @buffer.bytesize)
      bytes
    end

    def fill(deadline)
      remaining = deadline - now
      raise "memcached did not answer within #{READ_TIMEOUT}s" if remaining <= 0 || !@socket.wait_readable(remaining)

      chunk = @socket.read_nonblock(64 * 1024, exception: false)
      raise EOFError, "memcached closed the connection" if chunk.nil?

      @buffer << chunk unless chunk == :wait_readable
    end

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end

  def setup
    @wire = Wire.new(Strata::TestSupport.memcached_servers.first)
    @prefix = "strata-meta-test:#{SecureRandom.hex(8)}:"
  end

  def teardown
    @wire&.close
  end

  def key(name)
    @prefix + name
  end

  def set(key, value, **options)
    @wire.call(Request.ms_header(key, value.bytesize, **options), :ms, value).first
  end

  def get(key, **options)
    @wire.call(Request.mg(key, **options), :mg)
  end

  # --- mg / ms -------------------------------------------------------------------------------

  def test_mg_miss_echoes_key_and_opaque
    result, value = get(key("absent"), return_key: true, opaque: 17)

    assert_equal :miss, result.status
    assert_nil value
    assert_equal key("absent"), result.key
    assert_equal "17", result.opaque
  end

  def test_binary_value_round_trip_with_flags
    payload = (0..255).to_a.pack("C*") * 3 + "\r\nEN\r\n"
    stored = set(key("bin"), payload, ttl: 300, flags: 42, return_cas: true)

    assert_equal :hit, stored.status
    assert_operator stored.cas, :>, 0

    result, value = get(key("bin"), ttl_remaining: true, size: true, return_key: true)

    assert_equal :hit, result.status
    assert_equal payload.b, value
    assert_equal 42, result.client_flags
    assert_equal stored.cas, result.cas
    assert_equal payload.bytesize, result.size
    assert_includes 298..300, result.ttl
    assert_equal key("bin"), result.key
  end

  def test_no_ttl_reads_as_minus_one_and_empty_value_round_trips
    set(key("empty"), "")
    result, value = get(key("empty"), ttl_remaining: true)

    assert_equal "".b, value
    assert_equal(-1, result.ttl)
    assert_equal 0, result.client_flags
  end

  def test_keys_round_trip_in_both_spellings
    keys = [
      key("with space"), key("tab\there"), key("crlf\r\nmn"), key("nul\x00byte"),
      key("bin") + [0, 255, 1, 127, 128].pack("C*"), key("clé 日本"), key("clé:日本"), key("hi") + "\xff\xfe".b,
      (key("raw250") + "x" * 250).byteslice(0, 250), (key("b64 186") + "x" * 200).byteslice(0, 186)
    ]
    keys.each_with_index do |full, index|
      value = "value #{index}"

      assert_equal :hit, set(full, value, return_key: true).status, full.inspect
      result, got = get(full, return_key: true)

      assert_equal value.b, got, full.inspect
      assert_equal full.b, result.key, full.inspect
    end
  end

  def test_cas_mismatch_is_exists_and_match_stores
    stored = set(key("cas"), "one", return_cas: true)

    assert_equal :exists, set(key("cas"), "two", cas: stored.cas + 1000).status
    assert_equal :hit, set(key("cas"), "three", cas: stored.cas).status
    assert_equal "three".b, get(key("cas")).last
    assert_equal :not_found, set(key("cas-missing"), "x", cas: 1).status
  end

  def test_add_and_replace_modes
    assert_equal :not_stored, set(key("mode"), "r", mode: :replace).status
    assert_equal :hit, set(key("mode"), "a", mode: :add).status
    assert_equal :not_stored, set(key("mode"), "b", mode: :add).status
    assert_equal :hit, set(key("mode"), "c", mode: :append).status
    assert_equal "ac".b, get(key("mode")).last
  end

  # --- leases --------------------------------------------------------------------------------

  def test_lease_on_a_miss_is_won_once_and_completed_by_ms
    first, value = get(key("lease"), lease_ttl: 30)

    assert_equal :hit, first.status
    assert_equal "".b, value
    assert_predicate first, :won?
    refute_predicate first, :lease_sent?

    second, = get(key("lease"), lease_ttl: 30)

    refute_predicate second, :won?
    assert_predicate second, :lease_sent?

    assert_equal :hit, set(key("lease"), "filled", cas: first.cas).status
    third, value = get(key("lease"), lease_ttl: 30)

    assert_equal "filled".b, value
    refute_predicate third, :won?
    refute_predicate third, :lease_sent?
    refute_predicate third, :stale?
  end

  def test_md_invalidate_marks_stale_and_hands_out_one_win
    set(key("stale"), "old", ttl: 300)

    assert_equal :hit, @wire.call(Request.md(key("stale"), invalidate: true, ttl: 30), :md).first.status

    first, value = get(key("stale"), ttl_remaining: true)

    assert_equal "old".b, value
    assert_predicate first, :stale?
    assert_predicate first, :won?
    assert_includes 28..30, first.ttl

    second, = get(key("stale"))

    assert_predicate second, :stale?
    assert_predicate second, :lease_sent?
    refute_predicate second, :won?

    set(key("stale"), "new", cas: first.cas)
    fresh, value = get(key("stale"))

    assert_equal "new".b, value
    refute_predicate fresh, :stale?
  end

  def test_md_deletes_then_reports_not_found
    set(key("del"), "x")

    assert_equal :hit, @wire.call(Request.md(key("del")), :md).first.status
    assert_equal :not_found, @wire.call(Request.md(key("del")), :md).first.status
    assert_equal :miss, get(key("del")).first.status
  end

  # --- ma ------------------------------------------------------------------------------------

  def test_ma_autovivifies_increments_and_decrements_to_zero
    counter = key("counter")

    assert_equal :not_found, @wire.call(Request.ma(counter), :ma).first.status

    result, value = @wire.call(Request.ma(counter, vivify_ttl: 0, initial: 10), :ma)

    assert_equal :hit, result.status
    assert_equal 10, Response.counter_value(value)

    _, value = @wire.call(Request.ma(counter, delta: 5, opaque: 2), :ma)

    assert_equal 15, Response.counter_value(value)

    _, value = @wire.call(Request.ma(counter, mode: :decr, delta: 100), :ma)

    assert_equal 0, Response.counter_value(value)
  end

  # --- mn and quiet mode ---------------------------------------------------------------------

  def test_mn_ends_a_quiet_pipeline
    set(key("present"), "here")
    @wire.write(
      Request.mg(key("gone1"), quiet: true, opaque: 1),
      Request.mg(key("present"), quiet: true, opaque: 2),
      Request.mg(key("gone2"), quiet: true, opaque: 3),
      Request::MN
    )

    hit, value = @wire.reply

    assert_equal "2", hit.opaque
    assert_equal "here".b, value
    assert_equal :noop, @wire.reply.first.status
  end

  def test_mn_alone
    assert_equal :noop, @wire.call(Request::MN, :mn).first.status
  end

  # --- errors --------------------------------------------------------------------------------

  def test_value_over_the_item_limit_is_a_server_error_and_leaves_no_item
    set(key("big"), "small")
    big = "x" * (ITEM_SIZE_LIMIT + 1)

    error = assert_raises(Strata::Meta::ServerError) { set(key("big"), big) }
    assert_match(/too large/, error.message)

    # The server discarded the data block, so the stream is still in step, and the old item is gone.
    assert_equal :miss, get(key("big")).first.status
    assert_equal :noop, @wire.call(Request::MN, :mn).first.status
  end

  # Lines every memcached 1.6 rejects (a flag twice, a flag it does not know); the stream stays
  # in step after each.
  def test_a_request_line_the_server_rejects_is_a_client_error
    ["mg #{key("x")} v v\r\n", "mg #{key("x")} ~\r\n"].each do |line|
      @wire.write(line)
      assert_raises(Strata::Meta::ClientError, line.inspect) { @wire.reply(:mg) }
    end
    assert_equal :noop, @wire.call(Request::MN, :mn).first.status
  end
end
