# frozen_string_literal: true

require "test_helper"
require "securerandom"
require "strata/tiers/memcached"
require "support/child_processes"
require "support/memcached_process"

# Tiers::Memcached against the test memcacheds: the tier contract and the stale-fill property.
class MemcachedTierTest < Minitest::Test
  def setup
    @tier = Strata::Tiers::Memcached.new(servers: Strata::TestSupport.memcached_servers, timeout: 2)
    @prefix = "tier-#{SecureRandom.hex(6)}-"
  end

  def teardown
    @tier.close
  end

  def key(name)
    "#{@prefix}#{name}"
  end

  def test_is_a_tier_with_every_capability
    assert_kind_of Strata::Tier, @tier
    assert_equal %i[leases stale cas counters write_tokens gutter], @tier.capabilities.select { |_, yes| yes }.keys
    assert_equal Strata::Tier::CAPABILITIES.keys, @tier.capabilities.keys
    assert_respond_to @tier, :gutter?
  end

  def test_contract_operations
    assert @tier.set(key("a"), "1", ttl: 60)
    assert_equal "1", @tier.get(key("a"))
    refute @tier.add(key("a"), "2")
    assert @tier.add(key("b"), "2", ttl: 1.5)
    assert_equal({key("a") => "1", key("b") => "2"}, @tier.get_multi([key("a"), key("b"), key("c")]))

    value, token = @tier.get_with_cas(key("a"))
    assert_equal "1", value
    assert @tier.cas(key("a"), "3", token)
    refute @tier.cas(key("a"), "4", token)

    assert_equal 5, @tier.incr(key("n"), 5, initial: 5)
    assert_equal 7, @tier.incr(key("n"), 2)
    assert_equal 6, @tier.decr(key("n"))
    assert_nil @tier.incr(key("absent-counter"))

    assert @tier.delete(key("a"))
    assert_nil @tier.get(key("a"))
    assert @tier.invalidate(key("b"))
    assert_nil @tier.get(key("b")), "a plain get does not serve a stale entry"
    servers = Strata::TestSupport.memcached_servers
    assert_equal({servers: 2, down: 0, errors: servers.to_h { |server| [server, 0] }, down_since: {}, recovery: {}},
      @tier.stats)
  end

  def test_clear_empties_the_servers
    server = Strata::TestSupport::MemcachedProcess.new.start # a private server: clear flushes it all
    tier = Strata::Tiers::Memcached.new(servers: [server.server])
    tier.set(key("c"), "v")
    assert tier.clear
    assert_nil tier.get(key("c"))
  ensure
    tier&.close
    server&.kill
  end

  # A won lease whose fill arrives after an invalidate must not overwrite the invalidation:
  # A reads (wins, cas c1), the entry is invalidated, then A fills with what it computed before.
  def test_a_fill_older_than_an_invalidate_stays_stale
    lease = @tier.lease_get(key("race"), lease_ttl: 30)
    assert_predicate lease, :won?
    assert_nil lease.value

    assert @tier.invalidate(key("race"))
    refute @tier.lease_fill(key("race"), "v_old", lease.cas, ttl: 300), "the old fill is refused"

    # lease_get first: a plain get of a stale entry would take the refill win (see Meta::Client).
    after = @tier.lease_get(key("race"), lease_ttl: 30)
    assert_predicate after, :stale?, "the invalidation survives the fill"
    assert_predicate after, :won?, "the next reader refills"
    assert_nil @tier.get(key("race")), "the old fill is not served as fresh"
    assert @tier.lease_fill(key("race"), "v_new", after.cas, ttl: 300)
    assert_equal "v_new", @tier.get(key("race"))
  end

  def test_replace_stores_only_over_the_value_it_names
    @tier.set(key("page"), "stale", ttl: 300)
    refute @tier.replace(key("page"), "other", "new")
    assert @tier.replace(key("page"), "stale", "new", ttl: 300)
    refute @tier.replace(key("page"), "stale", "newer"), "a write since wins"
    @tier.delete(key("page"))
    refute @tier.replace(key("page"), "new", "resurrected"), "a delete since wins"
    assert_nil @tier.get(key("page"))
  end

  def test_a_fill_with_the_current_cas_is_fresh
    lease = @tier.lease_get(key("fresh"), lease_ttl: 30)
    assert @tier.lease_fill(key("fresh"), "v", lease.cas, ttl: 300)
    assert_equal "v", @tier.get(key("fresh"))
    refute_predicate @tier.lease_get(key("fresh"), lease_ttl: 30), :stale?
  end
end
