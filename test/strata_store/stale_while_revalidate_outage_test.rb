# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "support/memcached_process"

# stale_while_revalidate: while memcached is down (a killed server): the claim is taken in L1
# alone, so one caller on the host recomputes and the others answer the stale value, rather
# than every caller answering it until the window ends.
class StrataStoreStaleWhileRevalidateOutageTest < Strata::StoreCase
  def setup
    @memcached = Strata::TestSupport::MemcachedProcess.new.start
  end

  def teardown
    @memcached.kill
  end

  def test_with_memcached_down_one_caller_on_the_host_recomputes
    cache = build_store(namespace: "swr-down-#{SecureRandom.hex(4)}", memcached: {servers: [@memcached.server], timeout: 0.5})
    cache.write("page", "old", expires_in: 60, stale_while_revalidate: 60)
    @memcached.kill

    reports = capture_reports do
      travel 90.seconds do
        inside = nil
        value = cache.fetch("page", expires_in: 60, stale_while_revalidate: 60) do
          inside = Thread.new { cache.fetch("page", stale_while_revalidate: 60) { flunk "claimed twice on one host" } }.value
          "new"
        end
        assert_equal "new", value
        assert_equal "old", inside
      end
    end
    refute_empty reports, "the failures are reported"
  end
end
