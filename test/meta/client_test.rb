# frozen_string_literal: true

require "test_helper"
require "securerandom"
require "strata/meta"

# Meta::Client against the two test memcacheds: round trips, multi-gets across servers, the
# add/cas/counter semantics, stale-while-refill and the item size limit.
class MetaClientTest < Minitest::Test
  def setup
    @client = Strata::Meta::Client.new(servers: Strata::TestSupport.memcached_servers, timeout: 2)
    @prefix = "client-#{SecureRandom.hex(6)}-"
  end

  def teardown
    @client.close
  end

  def key(name)
    "#{@prefix}#{name}"
  end

  def test_round_trips_small_large_and_binary_values
    values = {
      "small" => "x" * 30,
      "large" => SecureRandom.random_bytes(25 * 1024),
      "binary" => (0..255).map(&:chr).join.b * 3,
      "empty" => "",
      # The connection gathers a command and its value into one 64 KiB write; these sit on and
      # past that edge, where the value goes to the socket by itself.
      "fills_buffer" => SecureRandom.random_bytes(64 * 1024 - 40),
      "past_buffer" => SecureRandom.random_bytes(64 * 1024 + 1),
      "huge" => SecureRandom.random_bytes(900 * 1024),
      "utf8" => "é-ü-€" * 1000
    }
    values.each { |name, value| assert @client.set(key(name), value) }
    values.each { |name, value| assert_equal value.b, @client.get(key(name)) }
  end

  def test_odd_keys_round_trip
    # The last three go as their digest forms (too long for memcached as they are or in base64).
    keys = [key("with space"), key("ctl\x00\x01\r\n"), key("é-utf8"), "k" * 250, key("a b" * 80), key("k" * 300),
      key("a b" * 80 + "!")]
    keys.each_with_index { |k, i| assert @client.set(k, "v#{i}"), k.inspect }
    keys.each_with_index { |k, i| assert_equal "v#{i}", @client.get(k), k.inspect }
    @client.delete("k" * 250)
  end

  def test_set_multi_and_delete_multi_pipeline_across_both_servers
    entries = Array.new(2_000) { |i| [key("sm-#{i}"), "value-#{i}" * (i % 7)] }.to_h
    assert_equal 2, entries.keys.map { |k| @client.ring.server_for(k) }.uniq.size

    assert_equal entries.transform_values { true }, @client.set_multi(entries, ttl: 60)
    assert_equal entries, @client.get_multi(entries.keys)

    present = entries.keys.first(1_000)
    absent = Array.new(10) { |i| key("sm-absent-#{i}") }
    deleted = @client.delete_multi(present + absent)
    assert_equal present.to_h { |k| [k, true] }.merge(absent.to_h { |k| [k, false] }), deleted
    assert_equal entries.except(*present), @client.get_multi(entries.keys)
  end

  def test_set_multi_checks_every_entry_before_sending_any
    good = key("sm-good")
    error = assert_raises(ArgumentError) { @client.set_multi({good => "ok", key("sm-bad") => 42}) }
    assert_includes error.message, "sm-bad"
    assert_raises(ArgumentError) { @client.set_multi({good => "ok", "" => "x"}) }
    assert_nil @client.get(good), "nothing of a refused batch is written"
  end

  def test_set_multi_stores_the_rest_and_drops_an_entry_over_the_item_limit
    big = key("sm-big")
    small = Array.new(50) { |i| key("sm-small-#{i}") }
    assert @client.set(big, "old copy")

    error = assert_raises(Strata::PartialError) do
      @client.set_multi(small.to_h { |k| [k, "s"] }.merge(big => "x" * (2 * 1024 * 1024)))
    end
    assert_kind_of Strata::ValueTooLargeError, error.cause
    assert_includes error.message, "item size limit"
    assert_equal small.to_h { |k| [k, true] }.merge(big => false), error.result
    assert_nil @client.get(big), "the old copy goes, as memcached drops it when it refuses a value"
    assert_equal small.to_h { |k| [k, "s"] }, @client.get_multi(small)
    assert @client.set(big, "fits"), "the connection stays in step"
    assert_equal "fits", @client.get(big)
  end

  # The E flag (a CAS chosen by the client) of the memcached versions bin/test runs: Debian 12's
  # and Debian 13's.
  EXPLICIT_CAS = {"1.6.18" => false, "1.6.38" => true}.freeze

  def test_probes_each_server_for_its_features
    @client.ring.servers.each do |server|
      features = @client.features(server)
      assert features.meta && features.leases && features.stale, "memcached 1.6 has meta, N and md I: #{features}"
      assert_equal EXPLICIT_CAS.fetch(features.version, features.explicit_cas), features.explicit_cas, features.to_s
      assert_equal 1024 * 1024, features.item_size_max
    end
  end

  def test_a_server_probed_without_leases_or_stale_gets_plain_reads_deletes_and_sets
    server = @client.ring.servers.first
    @client.features(server)
    @client.instance_variable_get(:@features)[server] = Strata::Meta::ServerFeatures.new("0", true, false, false, false, nil)
    k = Array.new(1_000) { |i| key("nolease-#{i}") }.find { |c| @client.ring.server_for(c) == server }

    2.times do # without leases every reader that misses is told to fill
      lease = @client.lease_get(k, lease_ttl: 30)
      assert lease.won && lease.value.nil? && lease.cas.nil?
    end
    assert @client.lease_fill(k, "filled", nil, ttl: 60), "a fill without a lease is a plain set"
    assert_equal "filled", @client.lease_get(k, lease_ttl: 30).value
    assert @client.invalidate(k, grace_ttl: 30)
    assert_nil @client.lease_get(k, lease_ttl: 30).value, "without md I an invalidate deletes: nothing stale"
  end

  # memcached gives the refill win of an invalidated key to the first mg, whatever it asks. A
  # plain read can't refill, so it must not keep the win: the next lease reader gets it.
  def test_a_plain_read_of_an_invalidated_key_leaves_the_refill_to_the_next_lease_reader
    plain = {get: key("stale-get"), get_with_cas: key("stale-cas"), get_multi: key("stale-multi")}
    plain.each_value do |k|
      assert @client.set(k, "old")
      assert @client.invalidate(k, grace_ttl: 30)
    end

    assert_nil @client.get(plain[:get])
    assert_nil @client.get_with_cas(plain[:get_with_cas])
    assert_equal({}, @client.get_multi([plain[:get_multi]]))

    plain.each do |read, k|
      lease = @client.lease_get(k, lease_ttl: 30)
      assert lease.won?, "after #{read} the lease reader wins the refill"
      refute lease.lease_sent?, "after #{read} nobody else holds the win"
      assert @client.lease_fill(k, "new", lease.cas, ttl: 60)
      assert_equal "new", @client.get(k)
    end
  end

  def test_miss_is_nil
    assert_nil @client.get(key("absent"))
    assert_nil @client.get_with_cas(key("absent"))
  end

  def test_get_multi_spans_both_servers_and_matches_single_gets
    [100, 5_000].each do |count|
      keys = Array.new(count) { |i| key("multi-#{count}-#{i}") }
      keys.each_with_index { |k, i| @client.set(k, "value-#{i}") if i.even? }
      servers = keys.map { |k| @client.ring.server_for(k) }.uniq
      assert_equal 2, servers.size, "keys should spread over both servers"

      singles = keys.each_with_object({}) do |k, found|
        value = @client.get(k)
        found[k] = value if value
      end
      assert_equal count / 2, singles.size
      assert_equal singles, @client.get_multi(keys)
    end
  end

  def test_add_only_when_absent
    assert @client.add(key("add"), "first")
    refute @client.add(key("add"), "second")
    assert_equal "first", @client.get(key("add"))
  end

  def test_cas_stores_only_with_the_current_token
    @client.set(key("cas"), "one")
    value, token = @client.get_with_cas(key("cas"))
    assert_equal "one", value
    assert @client.cas(key("cas"), "two", token)
    refute @client.cas(key("cas"), "three", token), "a used token must fail"
    assert_equal "two", @client.get(key("cas"))
    refute @client.cas(key("cas-absent"), "x", token)
  end

  def test_incr_and_decr
    assert_nil @client.incr(key("n"), 1)
    assert_equal 10, @client.incr(key("n"), 1, initial: 10)
    assert_equal 15, @client.incr(key("n"), 5)
    assert_equal 12, @client.decr(key("n"), 3)
    assert_equal 0, @client.decr(key("n"), 100)
    assert_equal "0", @client.get(key("n")).rstrip, "memcached pads a shrunk counter with spaces"
    assert_equal 7, @client.decr(key("m"), 1, initial: 7, ttl: 60)
  end

  def test_delete
    @client.set(key("del"), "v")
    assert @client.delete(key("del"))
    refute @client.delete(key("del"))
    assert_nil @client.get(key("del"))
  end

  def test_invalidate_then_lease_get_is_stale_and_won_once
    @client.set(key("inv"), "old", ttl: 300)
    assert @client.invalidate(key("inv"), grace_ttl: 30)

    first = @client.lease_get(key("inv"), lease_ttl: 10)
    assert_equal "old", first.value
    assert_predicate first, :stale?
    assert_predicate first, :won?

    second = @client.lease_get(key("inv"), lease_ttl: 10)
    assert_predicate second, :stale?
    refute_predicate second, :won?
    assert_predicate second, :lease_sent?

    assert @client.lease_fill(key("inv"), "new", first.cas, ttl: 60)
    fresh = @client.lease_get(key("inv"), lease_ttl: 10)
    assert_equal "new", fresh.value
    refute_predicate fresh, :stale?
    refute_predicate fresh, :won?
  end

  def test_lease_on_a_miss_serves_no_value
    lease = @client.lease_get(key("lease"), lease_ttl: 10)
    assert_nil lease.value
    assert_predicate lease, :won?
    other = @client.lease_get(key("lease"), lease_ttl: 10)
    assert_nil other.value
    assert_predicate other, :lease_sent?
    assert_nil @client.get(key("lease")), "a placeholder is a miss"
  end

  def test_value_over_the_item_limit_raises_and_the_key_then_misses
    @client.set(key("big"), "small")
    assert_raises(Strata::ValueTooLargeError) { @client.set(key("big"), "x" * ((1 << 20) + 1)) }
    assert_nil @client.get(key("big"))
    assert @client.set(key("big"), "after"), "the client keeps working"
    assert_equal "after", @client.get(key("big"))
    assert_equal 0, @client.stats[:down]
  end

  def test_long_ttl_is_sent_as_absolute_time
    assert @client.set(key("long"), "v", ttl: 40 * 24 * 3600)
    assert_equal "v", @client.get(key("long"))
    assert @client.set(key("frac"), "v", ttl: 0.2)
    assert_equal "v", @client.get(key("frac")), "0.2 s rounds up to 1 s"
  end

  # memcached holds a unix time as a signed 32-bit number: a TTL ending after 2038-01-19 is
  # held until then (it raised ArgumentError); an infinite one never ends (FloatDomainError).
  def test_ttls_past_2038_are_held_until_then_infinite_ones_never_end_and_nan_raises
    far = 100 * 365 * 24 * 3600
    assert @client.set(key("far"), "v", ttl: far)
    assert_equal({key("far2") => true}, @client.set_multi({key("far2") => "v"}, ttl: far))
    assert_equal 1, @client.incr(key("far-n"), 1, ttl: far, initial: 1)
    assert_predicate @client.lease_get(key("far-lease"), lease_ttl: far), :won?
    [key("far"), key("far2"), key("far-n"), key("far-lease")].each do |k|
      assert_in_delta (2**31 - 1) - Time.now.to_i, ttl_remaining(k), 5, k
    end

    assert @client.set(key("inf"), "v", ttl: Float::INFINITY)
    assert_equal(-1, ttl_remaining(key("inf")), "no expiry")
    assert @client.set(key("big"), "v", ttl: 10**30)
    assert_in_delta (2**31 - 1) - Time.now.to_i, ttl_remaining(key("big")), 5

    error = assert_raises(ArgumentError) { @client.set(key("nan"), "v", ttl: Float::NAN) }
    assert_match(/ttl.*NaN/, error.message)
    assert_nil @client.get(key("nan"))
  end

  private

  # The TTL memcached holds for k: seconds left, -1 for none.
  def ttl_remaining(k)
    host, port = @client.ring.server_for(k).split(":")
    conn = Strata::Meta::Connection.new(host, port)
    request = Strata::Meta::Request.mg(k, value: false, flags: false, cas: false, ttl_remaining: true)
    conn.request do |wire|
      wire.write(request)
      Strata::Meta::Response.parse(wire.read_line, :mg).ttl
    end
  ensure
    conn&.close
  end
end
