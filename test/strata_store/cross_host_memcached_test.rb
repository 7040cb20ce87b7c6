# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "support/child_processes"
require "support/memcached_process"

# Hosts sharing memcached with no poller (no SQL tier, or one whose invalidation log is off):
# another host's plain write or delete of a key reaches this host's L1 within
# coherence_interval, as invalidate_tags does (docs/coherence.md, "Other hosts without a
# poller"). A host is a process with an L1 file of its own: this process is host A, holding
# copies in its L1; a forked child is host B, which changes them and exits.
class StrataStoreCrossHostMemcachedTest < Strata::StoreCase
  include Strata::TestSupport::ChildProcesses

  # Seconds a child may take; seconds host A's L1 copy may take to lapse (the bound is
  # INTERVAL: this only keeps a broken build from waiting for ever).
  DEADLINE = 30
  WAIT = 10
  # A coherence_interval short enough for a test to wait it out.
  INTERVAL = 0.2

  def test_another_hosts_write_reaches_this_hosts_l1_after_coherence_interval
    a = host_store("a", coherence_interval: INTERVAL)
    a.write("k", "old", expires_in: 3600)
    assert_equal "old", a.read("k")

    in_host("b") { |b| b.write("k", "new", expires_in: 3600) }

    assert lapsed?(a, "k"), "A's L1 copy lapses, though the entry lives an hour"
    assert_equal "new", a.read("k")
    refute_nil a.stack[:l1].get(tier_key(a, "k")), "the new value is A's L1 copy now"
  end

  def test_another_hosts_delete_reaches_this_hosts_l1_after_coherence_interval
    a = host_store("a", coherence_interval: INTERVAL)
    in_host("b") { |b| b.write("k", "old") }
    assert_equal "old", a.read("k"), "read from memcached into A's L1"
    refute_nil a.stack[:l1].get(tier_key(a, "k"))

    in_host("b") { |b| b.delete("k") }

    assert lapsed?(a, "k")
    assert_nil a.read("k")
    assert_equal "filled", a.fetch("k") { "filled" }
  end

  def test_within_coherence_interval_this_hosts_l1_copy_is_served
    a = host_store("a", coherence_interval: 60)
    a.write("k", "old")

    in_host("b") { |b| b.write("k", "new") }

    assert_equal "old", a.read("k"), "an L1 hit, not a round trip, until the copy lapses"
  end

  def test_l1_ttls_are_capped_by_coherence_interval_or_polled_ttl_where_other_hosts_write
    capped = host_store("capped", sql: {path: File.join(@tmpdir, "own.sqlite3")}) # the log is off on a file
    logged = host_store("logged", sql: {path: File.join(@tmpdir, "shared.sqlite3"), invalidation_log: true})
    alone = build_store
    over_sql = build_store(l1: {path: File.join(@tmpdir, "sql.l1")}, sql: {path: File.join(@tmpdir, "sql.sqlite3")})

    assert_equal Strata::Dependencies::DEFAULT_COHERENCE_INTERVAL, capped.stack.host_ttl
    assert_equal Strata::Dependencies::POLLED_TTL, logged.stack.host_ttl,
      "the poller brings other hosts' writes; the cap, those it could not see"
    assert_nil alone.stack.host_ttl
    assert_nil over_sql.stack.host_ttl
  end

  def test_memcached_down_when_the_copy_lapses_is_a_miss_not_the_old_value
    server = Strata::TestSupport::MemcachedProcess.new.start
    begin
      a = host_store("a", coherence_interval: INTERVAL, servers: [server.server])
      a.write("k", "old")
      in_host("b", servers: [server.server]) { |b| b.write("k", "new") }
      server.kill

      reports = capture_reports do
        assert lapsed?(a, "k")
        assert_nil a.read("k"), "memcached can't say what k holds now: a miss"
        assert_nil a.read("k")
      end
      assert_equal 1, reports.size, "one outage, one report: #{reports.map { |r| r[:error].message }}"
      assert_equal :l2, reports.first[:context][:tier]
    ensure
      server.kill
    end
  end

  private

  # Whether host cache's L1 copy of name goes within WAIT seconds.
  def lapsed?(cache, name)
    wait_until(WAIT) { cache.stack[:l1].get(tier_key(cache, name)).nil? }
  end

  # A store of the host called name: its own L1 file in the test's directory, over memcached
  # (servers: the test's memcached unless given).
  def host_store(name, servers: Strata::TestSupport.memcached_servers, **options)
    l1 = {path: File.join(@tmpdir, "#{name}.l1"), size: Strata::StoreCase::TABLE_SIZE}
    cache = ActiveSupport::Cache::StrataStore.new(namespace: @namespace ||= "mconly-#{SecureRandom.hex(4)}", l1: l1,
      memcached: {servers: servers, timeout: 2}, **options)
    @stores << cache
    cache
  end

  # Runs the block with a store of host name in a child process, which must succeed.
  def in_host(name, **options, &block)
    pid = fork_child do
      cache = host_store(name, **options)
      result = block.call(cache)
      cache.close
      result
    end
    status = reap(pid, DEADLINE) || kill_and_reap(pid, DEADLINE)
    assert status&.success?, "host #{name} (#{pid}) failed: #{status.inspect}"
  end
end
