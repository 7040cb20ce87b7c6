# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "socket"
require "support/child_processes"
require "support/pausing_tier"

# StrataStore with the SQL tier under the others: what the durable tier guarantees when another
# tier is down, too small, racing a delete, or written by two processes at once.
class StrataStoreDurableTest < Strata::StoreCase
  include Strata::TestSupport::TrackedChildren

  DEADLINE = 60.0

  def setup
    @pids = []
    @namespace = "durable-#{SecureRandom.hex(6)}"
  end

  def teardown
    kill_tracked_children
  end

  def test_memcached_down_fetch_still_works_and_the_sql_tier_answers_another_host
    dead = {servers: ["127.0.0.1:#{closed_port}"], connect_timeout: 0.2, timeout: 0.2}
    host_a = build_store(l1: {path: File.join(@tmpdir, "a.l1")}, memcached: dead, sql: sql, namespace: @namespace)
    reports = capture_reports do
      assert_equal "computed", host_a.fetch("key") { "computed" }
    end
    assert(reports.any? { |report| report[:context][:tier] == :l2 }, "the memcached failure is reported")

    host_b = build_store(l1: {path: File.join(@tmpdir, "b.l1")}, memcached: dead, sql: sql, namespace: @namespace)
    capture_reports do
      assert_equal "computed", host_b.fetch("key") { flunk "the SQL tier holds it" }
    end
  end

  def test_a_value_over_the_sql_limit_is_refused_clearly_and_the_tiers_above_keep_it
    cache = build_store(sql: sql(max_value_size: 1000), namespace: @namespace)
    large = "x" * 5000
    reports = capture_reports { assert cache.write("key", large) }

    assert_equal large, cache.read("key"), "L1 holds it"
    error = reports.map { |report| report[:error] }.find { |e| e.is_a?(Strata::ValueTooLargeError) }
    assert error, "the refusal is reported"
    assert_match(/max_value_size is 1000/, error.message)
    assert_nil cache.stack[:l3].get(tier_key(cache, "key"))
  end

  # A fetch that read the SQL tier just before a delete ran through every tier must not put the
  # deleted value back above it: its backfill into memcached goes through its lease, which the
  # delete voided, and the copy it made in L1 is dropped with it.
  def test_a_reader_that_read_below_before_a_delete_refills_nothing
    cache = build_store(memcached: memcached, sql: sql, namespace: @namespace)
    cache.write("key", "old")
    key = tier_key(cache, "key")
    cache.stack[:l1].delete(key)
    cache.stack[:l2].delete(key)

    l3 = Strata::TestSupport::PausingTier.new(cache.stack[:l3])
    stack = Strata::Stack.new({l1: cache.stack[:l1], l2: cache.stack[:l2], l3: l3}, fill_wait: 5)
    reached, release = l3.pause_after(:get)
    reader = Thread.new do
      fill = stack.read_through(key)
      fill.get
    ensure
      fill.finish
    end
    reached.pop # the reader has the old bytes from the SQL tier and has not backfilled yet
    assert cache.delete("key")
    release << true

    refute_nil reader.value, "the reader itself still gets what it read"
    assert_nil cache.stack[:l1].get(key), "L1 was not refilled with the deleted value"
    assert_nil cache.stack[:l3].get(key)
    assert_nil cache.read("key"), "no tier serves the deleted value"
  end

  # A fill that took its lease before a delete reaches the SQL tier just after the delete passed
  # it, while memcached would still take its commit. The delete's tombstone refuses it there, so
  # no tier keeps the value computed before the delete, and a caller on another host that wins
  # the next lease finds nothing to copy up: it computes afresh.
  def test_a_fill_landing_between_a_deletes_sql_and_memcached_steps_is_refused
    assert_fill_between_sql_and_memcached_steps_is_refused(:delete)
  end

  # The same race with invalidate, which marks memcached's copy stale instead of deleting it.
  def test_a_fill_landing_between_an_invalidates_sql_and_memcached_steps_is_refused
    assert_fill_between_sql_and_memcached_steps_is_refused(:invalidate)
  end

  def assert_fill_between_sql_and_memcached_steps_is_refused(operation)
    cache = build_store(memcached: memcached, sql: sql, namespace: @namespace)
    key = tier_key(cache, "key")
    fill = cache.stack.read_through(key)
    assert_nil fill.get
    assert_predicate fill, :lease_pending?, "the filler holds the lease"

    l3 = Strata::TestSupport::PausingTier.new(cache.stack[:l3])
    remover = Strata::Stack.new({l1: cache.stack[:l1], l2: cache.stack[:l2], l3: l3})
    reached, release = l3.pause_after(operation)
    removing = Thread.new { remover.public_send(operation, key) }
    reached.pop # the SQL tier holds the tombstone; memcached is not reached yet
    refute fill.set(entry("computed before the #{operation}"), ttl: 60),
      "the SQL tier refused the fill"
    fill.finish
    assert_nil cache.stack[:l1].get(key), "the fill dropped its L1 copy"
    assert_equal "after", other_host.fetch("key") { "after" }, "the next lease's winner computes"
    release << true
    removing.join

    assert_equal "after", cache.read("key")
    assert_no_tier_holds_other_than(cache, key, entry("after"))
  end

  # The SQL tier as a tier without tombstones, as another tier below memcached might be: its
  # fills are plain adds, given back with plain deletes.
  class Unfenced < SimpleDelegator
    include Strata::Tier::PlainFills

    def capabilities
      __getobj__.capabilities.merge(tombstones: false)
    end
  end

  # Below memcached, a tier without tombstones can't refuse a fill that read before a delete and
  # writes it just after the delete passed it; the fill then commits in memcached before the
  # delete gets there. So the delete clears such a tier once more after memcached.
  def test_a_fill_landing_in_an_unfenced_tier_between_a_deletes_steps_is_cleared
    cache = build_store(memcached: memcached, sql: sql, namespace: @namespace)
    key = tier_key(cache, "key")
    l3 = Strata::TestSupport::PausingTier.new(Unfenced.new(cache.stack[:l3]))
    tiers = {l1: cache.stack[:l1], l2: cache.stack[:l2], l3: l3}
    filler = Strata::Stack.new(tiers)
    fill = filler.read_through(key)
    assert_nil fill.get
    assert_predicate fill, :lease_pending?

    reached, release = l3.pause_after(:delete)
    deleting = Thread.new { Strata::Stack.new(tiers).delete(key) }
    reached.pop # the SQL tier is cleared; memcached is not reached yet
    assert fill.set(entry("computed before the delete"), ttl: 60), "memcached took the fill"
    fill.finish
    release << true
    deleting.join

    assert_nil cache.stack[:l3].get(key), "the unfenced tier does not keep the fill"
    assert_nil cache.stack[:l1].get(key)
    assert_nil cache.read("key")
  end

  # A fill that reached the SQL tier before a delete, and commits in memcached only after it:
  # the delete buried its SQL copy, so a caller on another host that wins the next lease (before
  # the refused fill has taken its copies back) computes afresh instead of copying it up; and
  # the refused fill, taking back its SQL copy, leaves that caller's value there alone.
  def test_a_fill_refused_after_a_delete_leaves_nothing_for_the_next_lease_to_copy_up
    cache = build_store(memcached: memcached, sql: sql, namespace: @namespace)
    key = tier_key(cache, "key")
    l3 = Strata::TestSupport::PausingTier.new(cache.stack[:l3])
    filler = Strata::Stack.new({l1: cache.stack[:l1], l2: cache.stack[:l2], l3: l3})
    fill = filler.read_through(key)
    assert_nil fill.get

    reached, release = l3.pause_after(:add_for_fill)
    filling = Thread.new do
      fill.set(entry("computed before the delete"), ttl: 60)
    ensure
      fill.finish
    end
    reached.pop # the fill is in the SQL tier, not yet committed in memcached
    assert cache.delete("key"), "the delete found the fill's copy"
    assert_equal "after", other_host.fetch("key") { "after" }, "the next lease's winner computes"
    release << true

    refute filling.value, "memcached refused the fill"
    assert_equal "after", cache.read("key")
    assert_equal entry("after"), cache.stack[:l3].get(key), "the SQL tier keeps the next lease's value"
    assert_no_tier_holds_other_than(cache, key, entry("after"))
  end

  # Every tier of cache holds bytes under key, or nothing.
  def assert_no_tier_holds_other_than(cache, key, bytes)
    cache.stack.tier_names.each do |name|
      held = cache.stack[name].get(key)
      assert_equal bytes, held, "#{name} holds another value" if held
    end
  end

  # Without memcached a fill holds only the host lock, and its add to the SQL tier is its commit
  # point: it writes L1 before it. One that got into the SQL tier before a delete has its L1 copy
  # cleared by the delete too; one that comes after is refused and drops its L1 copy.
  def test_a_host_locked_fill_racing_a_delete_leaves_no_copy_behind
    [:before, :after].each do |order|
      cache = build_store(sql: sql, namespace: "#{@namespace}-#{order}")
      key = tier_key(cache, "key")
      l3 = Strata::TestSupport::PausingTier.new(cache.stack[:l3])
      filler = Strata::Stack.new({l1: cache.stack[:l1], l3: l3})
      fill = filler.read_through(key)
      assert_nil fill.get
      assert fill.host_lock

      if order == :before
        reached, release = l3.pause_after(:add_for_fill)
        filling = Thread.new { fill.set(entry("computed before the delete"), ttl: 60) }
        reached.pop # the fill is in both tiers
        assert cache.delete("key")
        release << true
        assert filling.value, "nothing refused the fill: it came first"
      else
        reached, release = l3.pause_after(:delete)
        deleting = Thread.new { filler.delete(key) }
        reached.pop # the SQL tier holds the tombstone; L1 is not cleared yet
        refute fill.set(entry("computed before the delete"), ttl: 60), "the tombstone refused it"
        release << true
        deleting.join
      end
      fill.finish

      assert_nil cache.stack[:l1].get(key), "L1 keeps no copy (fill #{order} the delete)"
      assert_nil cache.stack[:l3].get(key)
      assert_nil cache.read("key")
    end
  end

  # The same store on another host: its own L1 file, the same memcached and SQL tier.
  def other_host
    build_store(l1: {path: File.join(@tmpdir, "other-host.l1")}, memcached: memcached, sql: sql, namespace: @namespace)
  end

  # A fill that found nothing, and a write of the same key that reaches the SQL tier first: the
  # write is newer than what the filler computed, so the fill gives way in every tier instead of
  # overwriting the write below and leaving it to be dropped above by the write's settle check.
  def test_a_fill_gives_way_to_a_write_that_reached_the_sql_tier_first
    assert_fill_gives_way_to_a_write(memcached: memcached)
  end

  # The same without memcached: the fill holds only the host lock.
  def test_a_host_locked_fill_gives_way_to_a_write_that_reached_the_sql_tier_first
    assert_fill_gives_way_to_a_write
  end

  def assert_fill_gives_way_to_a_write(**tiers)
    cache = build_store(**tiers, sql: sql, namespace: @namespace)
    key = tier_key(cache, "key")
    fill = cache.stack.read_through(key)
    assert_nil fill.get
    assert fill.host_lock

    l3 = Strata::TestSupport::PausingTier.new(cache.stack[:l3])
    writer = Strata::Stack.new(cache.stack.tier_names.to_h { |name| [name, (name == :l3) ? l3 : cache.stack[name]] })
    reached, release = l3.pause_after(:set)
    writing = Thread.new { writer.set(key, entry("written"), ttl: 60) }
    reached.pop # the write is in the SQL tier, not yet above it
    refute fill.set(entry("computed before the write"), ttl: 60), "the fill gave way"
    fill.finish
    release << true
    assert writing.value

    cache.stack.tier_names.each do |name|
      assert_equal entry("written"), cache.stack[name].get(key), "#{name} holds the write"
    end
    assert_equal "written", cache.read("key")
  end

  # Without a lease (no memcached) a plain delete still goes bottom-up: a reader that missed L1
  # after the delete finds nothing below either.
  def test_delete_goes_bottom_up
    cache = build_store(sql: sql, namespace: @namespace)
    cache.write("key", "old")
    key = tier_key(cache, "key")

    l1 = Strata::TestSupport::PausingTier.new(cache.stack[:l1])
    stack = Strata::Stack.new({l1: l1, l3: cache.stack[:l3]})
    reached, release = l1.pause_after(:get)
    cache.stack[:l1].delete(key) # the reader will miss L1
    reader = Thread.new { stack.get(key) }
    reached.pop
    assert cache.delete("key")
    release << true

    assert_nil reader.value
    assert_nil cache.stack[:l1].get(key)
  end

  # Writer A has written the SQL tier and not yet the tiers above; writer B writes everything.
  # Then A goes on. The tiers above must not keep A's value over B's in the SQL tier.
  def test_a_writer_overtaken_below_does_not_leave_its_value_above
    cache = build_store(memcached: memcached, sql: sql, namespace: @namespace)
    key = tier_key(cache, "key")
    l3 = Strata::TestSupport::PausingTier.new(cache.stack[:l3])
    writer_a = Strata::Stack.new({l1: cache.stack[:l1], l2: cache.stack[:l2], l3: l3})
    reached, release = l3.pause_after(:set)
    a = Thread.new { writer_a.set(key, entry("A"), ttl: 60) }
    reached.pop
    assert cache.stack.set(key, entry("B"), ttl: 60)
    release << true
    a.join

    assert_equal entry("B"), cache.stack[:l3].get(key)
    {l1: cache.stack[:l1].get(key), l2: cache.stack[:l2].get(key)}.each do |tier, bytes|
      assert_equal entry("B"), bytes, "#{tier} does not keep A's value" unless bytes.nil?
    end
    assert_equal "B", cache.read("key")
  end

  # Two processes of one host write one key at once, many times; afterwards every tier that
  # holds the key holds what the SQL tier holds. (Processes on different hosts each keep their own
  # L1; a write elsewhere reaches another host's L1 only through its poller or through expiry:
  # docs/coherence.md, "Other hosts".)
  def test_two_processes_writing_one_key_leave_every_tier_agreeing
    rounds = 200
    pids = 2.times.map do |writer|
      fork_tracked do
        cache = ActiveSupport::Cache::StrataStore.new(l1: {path: table_path, size: TABLE_SIZE},
          memcached: memcached, sql: sql, namespace: @namespace)
        rounds.times { |i| cache.write("key", "writer #{writer} round #{i}") }
        true
      end
    end
    pids.each { |pid| assert_predicate reap_child(pid), :success? }

    cache = build_store(memcached: memcached, sql: sql, namespace: @namespace)
    key = tier_key(cache, "key")
    bottom = cache.stack[:l3].get(key)
    refute_nil bottom
    {l1: cache.stack[:l1].get(key), l2: cache.stack[:l2].get(key)}.each do |tier, bytes|
      assert_equal bottom, bytes, "#{tier} agrees with the SQL tier" unless bytes.nil?
    end
  end

  private

  def entry(value)
    Strata::Entry.encode(value, flags: Strata::Entry::UTF8, expires_at: 0)
  end

  def sql(**options)
    {path: File.join(@tmpdir, "l3.sqlite3")}.merge(options)
  end

  def memcached
    {servers: Strata::TestSupport.memcached_servers, timeout: 2}
  end

  def closed_port
    server = TCPServer.new("127.0.0.1", 0)
    port = server.addr[1]
    server.close
    port
  end
end
