# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "support/memcached_process"
require "support/fake_clock"

# Issue 22, fault 1, through the Rails API: a memcached server stalls (SIGSTOP) long enough to be
# marked down; a write, a delete and a counter change go to the gutter meanwhile; the server runs
# again and retry_after passes. Then each key reads as what was written during the outage or a
# miss, never the value from before it, and the deleted key stays deleted. L2 alone and L1 over
# L2. The ring's clock is the test's, so retry_after passes only when the test says so.
class StrataStoreMemcachedOutageTest < Strata::StoreCase
  RETRY_AFTER = 10

  FakeClock = Strata::TestSupport::FakeClock

  def setup
    @clock = FakeClock.new
    @primary = Strata::TestSupport::MemcachedProcess.new.start
    @gutter = Strata::TestSupport::MemcachedProcess.new.start
  end

  def teardown
    @primary.kill
    @gutter.kill
  end

  def test_l2_only
    cache = ActiveSupport::Cache::StrataStore.new(memcached: memcached_options)
    @stores << cache
    outage(cache, written_after: [nil])
  end

  def test_l1_and_l2
    # L1 keeps the v2 written during the outage; memcached's v1 must not come back under it.
    outage(build_store(memcached: memcached_options), written_after: ["v2"])
  end

  private

  # stall, write v2, delete, count, recover: reads give v2 or a miss, never v1.
  def outage(cache, written_after:)
    client = cache.stack[:l2].client
    written, deleted, counted, probe = names_on(cache, client, @primary.server, 4)
    assert cache.write(written, "v1")
    assert cache.write(deleted, "v1")
    assert_equal 5, cache.increment(counted, 5)

    @primary.pause
    2.times { assert_nil cache.read(probe), "a timed-out read is a miss" }
    refute client.ring.up?(@primary.server), "two timeouts in a row mark it down"
    assert cache.write(written, "v2"), "the write goes to the gutter"
    reports = capture_reports { cache.delete(deleted) }
    assert_equal [@primary.server], reports.map { |report| report[:error].server },
      "the delete that reached only the gutter is reported once, naming its server"
    assert_nil cache.read(deleted)
    assert_equal "v2", cache.read(written)
    assert_equal 1, cache.increment(counted), "the counter starts again in the gutter"

    @primary.resume
    @clock.now += RETRY_AFTER
    assert_equal [@primary.server, :primary], client.ring.route(tier_key(cache, written))
    no_reports = capture_reports do
      assert_includes written_after, cache.read(written), "v2 or a miss, never v1"
      assert_nil cache.read(deleted), "the deleted key stays deleted"
      assert_equal 1, cache.increment(counted), "the old counter (5) is deleted, not resumed"
    end
    assert_empty no_reports
    assert_nil Strata::Meta::Client.new(servers: [@primary.server]).get(tier_key(cache, deleted))
  end

  def memcached_options
    {servers: [@primary.server, @gutter.server], timeout: 0.3, connect_timeout: 0.3, pool_timeout: 0.3,
     retry_after: RETRY_AFTER, clock: @clock}
  end

  # count names whose keys the ring puts on server.
  def names_on(cache, client, server, count)
    prefix = "outage-#{SecureRandom.hex(4)}-"
    names = (0...10_000).lazy.map { |i| "#{prefix}#{i}" }.select do |name| # bound: 10,000 candidates
      client.ring.server_for(tier_key(cache, name)) == server
    end
    names.first(count)
  end
end
