# frozen_string_literal: true

require "test_helper"
require "strata/meta/ring"
require "support/fake_clock"

# The ring is pure: no server needs to run.
class MetaRingTest < Minitest::Test
  Ring = Strata::Meta::Ring

  SERVERS = %w[10.0.0.1:11211 10.0.0.2:11211 10.0.0.3:11211 10.0.0.4:11211].freeze
  KEYS = Array.new(10_000) { |i| "key:#{i}" }.freeze

  FakeClock = Strata::TestSupport::FakeClock

  def counts(ring)
    KEYS.map { |key| ring.server_for(key) }.tally
  end

  def test_same_key_same_server_across_instances_and_listing_order
    a = Ring.new(SERVERS)
    b = Ring.new(SERVERS.reverse)
    KEYS.first(1000).each do |key|
      assert_equal a.server_for(key), a.server_for(key)
      assert_equal a.server_for(key), b.server_for(key)
    end
  end

  # Pinned (again when keys moved from MD5 to CRC-32, before any release): a change here would
  # remap every key of every deployed cache. No per-process seed
  # takes part, so any process (or a restarted one) agrees.
  def test_mapping_is_pinned
    ring = Ring.new(SERVERS)
    expected = {"a" => "10.0.0.3:11211", "user:42" => "10.0.0.1:11211", "key:0" => "10.0.0.3:11211",
                "key:1" => "10.0.0.4:11211", "session:abc" => "10.0.0.1:11211", "views/home" => "10.0.0.2:11211"}
    assert_equal expected, expected.keys.to_h { |key| [key, ring.server_for(key)] }
  end

  def test_even_weights_spread_evenly
    counts(Ring.new(SERVERS)).each_value do |n|
      assert_in_delta 2500, n, 2500 * 0.2
    end
  end

  def test_distribution_follows_weights
    ring = Ring.new(["10.0.0.1:11211:1", "10.0.0.2:11211:2", "10.0.0.3:11211:3"])
    counts = counts(ring)
    {"10.0.0.1:11211" => 1, "10.0.0.2:11211" => 2, "10.0.0.3:11211" => 3}.each do |server, weight|
      expected = KEYS.size * weight / 6.0
      assert_in_delta expected, counts.fetch(server), expected * 0.2, server
    end
  end

  def test_removing_one_of_four_moves_about_a_quarter
    before = Ring.new(SERVERS)
    after = Ring.new(SERVERS.first(3))
    moved = KEYS.count { |key| before.server_for(key) != after.server_for(key) }
    # Only the removed server's keys move; each of them moves.
    KEYS.each do |key|
      assert_equal before.server_for(key), after.server_for(key) unless before.server_for(key) == SERVERS[3]
    end
    assert_in_delta KEYS.size / 4.0, moved, KEYS.size * 0.08
  end

  def test_route_primary_when_up
    ring = Ring.new(SERVERS)
    assert_equal [ring.server_for("a"), :primary], ring.route("a")
  end

  def test_mark_down_routes_to_gutter_until_retry_after
    clock = FakeClock.new
    ring = Ring.new(SERVERS, clock: clock)
    key = "user:42"
    primary = ring.server_for(key)

    ring.mark_down(primary, retry_after: 5.0)
    refute ring.up?(primary)
    gutter, role = ring.route(key)
    assert_equal :gutter, role
    refute_equal primary, gutter
    assert ring.up?(gutter)
    assert_equal primary, ring.server_for(key), "down is not a rehash"

    clock.now += 4.9
    assert_equal [gutter, :gutter], ring.route(key)

    clock.now += 0.2
    assert ring.up?(primary)
    assert_equal [primary, :primary], ring.route(key)
  end

  # Timeouts mark a server down only down_after in a row; an answer between them starts again.
  def test_time_out_marks_down_after_down_after_in_a_row
    clock = FakeClock.new
    ring = Ring.new(SERVERS, clock: clock, down_after: 3)
    server = SERVERS.first

    refute ring.time_out(server)
    refute ring.time_out(server)
    assert ring.up?(server)
    assert ring.timing_out?
    ring.answered(server)
    refute ring.timing_out?
    refute ring.time_out(server)
    refute ring.time_out(server)
    assert ring.time_out(server, retry_after: 5.0), "the third in a row"
    refute ring.up?(server)
    refute ring.timing_out?, "the count starts again for the next outage"
    assert_equal 5, ring.health[:errors][server], "each timeout counts once"
    clock.now += 5.1
    assert ring.up?(server)
    assert_raises(ArgumentError) { Ring.new(SERVERS, down_after: 0) }
  end

  def test_gutter_is_up_and_stable_when_two_are_down
    clock = FakeClock.new
    ring = Ring.new(SERVERS, clock: clock)
    down = SERVERS.first(2)
    down.each { |server| ring.mark_down(server) }
    KEYS.first(2000).each do |key|
      server, role = ring.route(key)
      refute_includes down, server
      assert_equal(down.include?(ring.server_for(key)) ? :gutter : :primary, role)
      assert_equal [server, role], ring.route(key)
    end
  end

  def test_default_retry_after_comes_from_options
    clock = FakeClock.new
    ring = Ring.new(SERVERS, clock: clock, retry_after: 2.0, unrelated_option: true)
    ring.mark_down(SERVERS[0])
    clock.now += 1.9
    refute ring.up?(SERVERS[0])
    clock.now += 0.2
    assert ring.up?(SERVERS[0])
  end

  def test_all_down_raises_tier_error_naming_the_keys_server
    ring = Ring.new(SERVERS.first(2), clock: FakeClock.new)
    SERVERS.first(2).each { |server| ring.mark_down(server) }
    error = assert_raises(Strata::TierError) { ring.route("k") }
    assert_equal ring.server_for("k"), error.server
  end

  # An outage starts at the first mark_down and lasts through retries (up? again after
  # retry_after, then marked down again) until mark_up; every failure counts.
  def test_health_counts_failures_and_keeps_an_outage_through_its_retries
    clock = FakeClock.new
    ring = Ring.new(SERVERS.first(2), clock: clock, retry_after: 1.0)
    first, other = SERVERS.first(2)
    assert_equal({errors: {first => 0, other => 0}, down_since: {}}, ring.health)

    started = Time.now
    ring.mark_down(first)
    since = ring.health[:down_since].fetch(first)
    assert_operator since, :>=, started
    clock.now += 1.5
    assert ring.up?(first), "retried after retry_after"
    ring.mark_down(first)
    ring.count_error(other)
    assert_equal({errors: {first => 2, other => 1}, down_since: {first => since}}, ring.health)

    ring.mark_down(other)
    before = ring.health[:errors]
    assert_raises(Strata::TierError) { ring.route("k") }
    owner = ring.server_for("k")
    assert_equal before.merge(owner => before[owner] + 1), ring.health[:errors], "a route refused counts too"

    ring.mark_up(first)
    assert ring.up?(first), "mark_up ends the wait too"
    assert_equal [other], ring.health[:down_since].keys
    assert_raises(ArgumentError) { ring.mark_up("other:1") }
    assert_raises(ArgumentError) { ring.count_error("other:1") }
  end

  # The watcher (the host's record) hears an outage's first mark and each mark again with its
  # start, and its end once; a mark_up of a server that was not down (a first contact) and
  # routing tell it nothing.
  def test_the_watcher_hears_the_transitions_only
    clock = FakeClock.new
    ring = Ring.new(SERVERS.first(2), clock: clock, retry_after: 1.0)
    first, other = SERVERS.first(2)
    heard = []
    watcher = Object.new
    watcher.define_singleton_method(:down) { |server, since| heard << [:down, server, since] }
    watcher.define_singleton_method(:up) { |server| heard << [:up, server] }
    ring.watcher = watcher

    ring.mark_up(first)
    ring.route("k")
    assert_empty heard, "a server that was up: nothing to tell"

    ring.mark_down(first)
    since = ring.health[:down_since].fetch(first)
    clock.now += 1.5
    assert ring.up?(first)
    ring.mark_down(first)
    ring.time_out(other)
    assert_equal [[:down, first, since], [:down, first, since]], heard, "a retry's mark again, with the outage's start"

    ring.mark_up(first)
    ring.mark_up(first)
    ring.mark_up(other)
    assert_equal [:up, first], heard.last
    assert_equal 3, heard.size, "one end per outage; a timeout short of down_after is no outage"
  end

  def test_rejects_bad_specs
    assert_raises(ArgumentError) { Ring.new([]) }
    assert_raises(ArgumentError) { Ring.new(["host"]) }
    assert_raises(ArgumentError) { Ring.new(["host:11211:0"]) }
    assert_raises(ArgumentError) { Ring.new(["host:11211", "host:11211:2"]) }
    assert_raises(ArgumentError) { Ring.new(SERVERS).mark_down("other:1") }
  end
end
