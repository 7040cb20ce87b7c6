# frozen_string_literal: true

require_relative "strata_store/store_case"
require "strata/tiers/sql"
require "minitest/mock"
require "rbconfig"
require "support/child_processes"
require "support/pausing_tier"

# Strata::Poller over an SQLite file with the invalidation log on: one poller per L1 table
# (elected through it, handed over when its holder dies), what it does when its place in the log
# can't be trusted, and how it lives with processes (fork, close, failures). P2 itself is
# cross_host_test.rb's.
class PollerTest < Strata::StoreCase
  include Strata::TestSupport::ChildProcesses

  DEADLINE = 30
  BOUND = 10

  def sql_path
    File.join(@tmpdir, "shared.sqlite3")
  end

  # A store on the test's L1 table (or l1_path's) over the shared SQLite file.
  def host(l1_path: table_path, **options)
    cache = ActiveSupport::Cache::StrataStore.new(l1: {path: l1_path, size: TABLE_SIZE},
      sql: {path: sql_path, invalidation_log: true}, **options)
    @stores << cache
    cache
  end

  def poller_of(cache)
    cache.engine.poller
  end

  # A stack over its own L1 file and the shared SQLite file, and a poller on it that only the
  # test drives (Poller#round).
  def driven(name = "driven")
    l1 = Strata::Tiers::SharedMemory.new(path: File.join(@tmpdir, "#{name}.l1"), size: TABLE_SIZE)
    sql = Strata::Tiers::SQL.new(path: sql_path, invalidation_log: true)
    @stores << l1 << sql
    stack = Strata::Stack.new({l1: l1, l3: sql})
    poller = Strata::Poller.new(l1, sql, stack.dependencies, on_error: ->(error, _) { raise error }, interval: 1,
      listen: false, gap_timeout: 10)
    [stack, poller]
  end

  # A stack whose SQL tier pauses on request (PausingTier), and its poller, driven by the test:
  # [l1, the pausing SQL tier, stack, poller].
  def filling_host
    l1 = Strata::Tiers::SharedMemory.new(path: File.join(@tmpdir, "filling.l1"), size: TABLE_SIZE)
    sql = Strata::Tiers::SQL.new(path: sql_path, invalidation_log: true)
    @stores << l1 << sql
    slow = Strata::TestSupport::PausingTier.new(sql)
    stack = Strata::Stack.new({l1: l1, l3: slow})
    poller = Strata::Poller.new(l1, sql, stack.dependencies, on_error: ->(error, _) { raise error }, interval: 1,
      listen: false, gap_timeout: 10)
    [l1, slow, stack, poller]
  end

  # Whether thread reached its pause (the queue got a push) within 5 s.
  def reached?(queue, thread)
    500.times { break if !queue.empty? || thread.join(0.01) } # bound: 5 s
    !queue.empty?
  end

  def gaps(stack)
    stack[:l1].get(Strata::Poller::STATE_KEY).unpack("q<*").drop(2).each_slice(2).map(&:first)
  end

  def execute(sql)
    Strata::Tiers::SQL.new(path: sql_path).tap { |tier| @stores << tier }.connection_class.connection_pool.with_connection { |c| c.execute(sql) }
  end

  def test_a_store_runs_a_poller_only_over_l1_and_a_logging_sql_tier
    assert poller_of(host)
    assert_nil poller_of(build_store), "L1 alone"
    unlogged = ActiveSupport::Cache::StrataStore.new(l1: {path: File.join(@tmpdir, "u.l1"), size: TABLE_SIZE},
      sql: {path: File.join(@tmpdir, "own.sqlite3")})
    @stores << unlogged
    assert_nil poller_of(unlogged), "an embedded file without the log"
    assert_raises(ArgumentError) { host(l1_path: File.join(@tmpdir, "x.l1"), poll_interval: 0) }
    assert_raises(ArgumentError) { host(l1_path: File.join(@tmpdir, "y.l1"), poll_listen: "no") }
  end

  def test_two_stores_on_one_l1_table_run_one_poller_and_the_other_takes_over_on_close
    first = host
    second = host
    pollers = [first, second].map { |cache| poller_of(cache) }
    assert wait_until(BOUND) { pollers.count(&:holding?) == 1 }
    assert_equal 1, pollers.count(&:holding?)
    refute_includes first.stack.keys + second.stack.keys, Strata::Poller::ELECTION_KEY

    holder = pollers.find(&:holding?)
    other = (pollers - [holder]).first
    [first, second][pollers.index(holder)].close
    assert wait_until(BOUND) { other.holding? }, "the other store's poller takes over"
  end

  def test_the_holder_killed_hands_the_poller_over_and_its_successor_goes_on_from_its_place
    reader, writer = IO.pipe
    hold, release = IO.pipe # the child blocks on hold until it is killed
    pid = fork_child do
      reader.close
      release.close
      poller = poller_of(host)
      next false unless wait_until(BOUND) { poller.holding? && poller.last_seen }

      writer.puts("holding")
      hold.gets
    end
    writer.close
    hold.close
    assert_equal "holding", reader.gets(chomp: true)
    cache = host
    cache.write("k", "v") # the holder applies its row, and the successor must not clear L1
    assert wait_until(BOUND) { poller_of(cache).last_seen.to_i > 0 }, "the holder read the write's row"
    refute poller_of(cache).holding?
    assert_equal pid, Strata::Poller.holder_pid(cache.stack[:l1]), "another process tells which one polls"

    cache.stack[:l1].set(tier_key(cache, "k"), "cached")

    kill_and_reap(pid, DEADLINE)
    assert wait_until(BOUND) { poller_of(cache).holding? }, "the lease lapses and this process takes it"
    assert_equal Process.pid, Strata::Poller.holder_pid(cache.stack[:l1])
    taken = Strata::Entry.now
    assert wait_until(BOUND) { cache.stack[:l1].get(Strata::Poller::STATE_KEY).unpack("q<*")[1] > taken }, "a round since"
    assert_equal "cached", cache.stack[:l1].get(tier_key(cache, "k")), "no resync: L1 kept its entries"
  ensure
    reader&.close
    release&.close
  end

  # The state evicted under the holder: it goes on from the place it kept, clearing nothing.
  # A new holder has no place of its own: it clears L1.
  def test_a_lost_state_clears_l1_unless_its_holder_kept_its_place
    stack, poller = driven
    other, = driven("other")
    poller.round # the first round: nothing to go on from, L1 cleared
    stack.set("k", "v1")
    poller.round
    stack[:l1].set("k", "v1") # a copy read from below
    stack[:l1].set("unrelated", "kept")

    stack[:l1].delete(Strata::Poller::STATE_KEY) # evicted, say
    other.set("k", "v2") # another host's change
    poller.round
    assert_nil stack[:l1].get("k"), "the change is applied"
    assert_equal "kept", stack[:l1].get("unrelated"), "and L1 is not cleared"
    assert_equal "v2", stack.get("k")
    refute_nil stack[:l1].get(Strata::Poller::STATE_KEY), "written again"

    successor = Strata::Poller.new(stack[:l1], stack[:l3], stack.dependencies, on_error: ->(error, _) { raise error },
      interval: 1, listen: false, gap_timeout: 10)
    [Strata::Poller::STATE_KEY, Strata::Poller::ELECTION_KEY].each { |key| stack[:l1].delete(key) } # the holder gone
    other.set("k", "v3") # a change no poller of this host has read
    successor.round
    assert_nil stack[:l1].get("unrelated"), "L1 was cleared"
    assert_equal "v3", stack.get("k")
    assert successor.last_seen
  end

  def test_a_state_older_than_half_the_retention_or_ahead_of_the_log_clears_l1
    stack, poller = driven
    poller.round
    stack[:l1].set("k", "cached")
    seq = poller.last_seen
    stack[:l1].set(Strata::Poller::STATE_KEY, [seq, Strata::Entry.now - 301_000].pack("q<*"))
    poller.round
    assert_nil stack[:l1].get("k"), "rows since may have been trimmed"

    stack[:l1].set("k", "cached")
    stack[:l1].set(Strata::Poller::STATE_KEY, [seq + 1_000, Strata::Entry.now].pack("q<*"))
    poller.round
    assert_nil stack[:l1].get("k"), "a log made anew"
  end

  def test_applying_a_row_twice_is_harmless
    stack, poller = driven
    other, = driven("other")
    poller.round
    other.set("k", "v")
    other.dependencies.bump([1])
    seq = poller.last_seen
    2.times do
      stack[:l1].set("k", "stale")
      stack[:l1].set(Strata::Poller::STATE_KEY, [seq, Strata::Entry.now].pack("q<*"))
      poller.round
      assert_nil stack[:l1].get("k")
    end
    assert_equal "v", stack.get("k")
  end

  # A key row whose key L1 holds as the SQL tier does now (this host's own write) leaves it.
  def test_a_copy_equal_to_the_sql_tiers_stays
    stack, poller = driven
    poller.round
    stack.set("own", "v")
    stack[:l1].set("stale", "old")
    stack[:l3].set("stale", "new")
    poller.round
    assert_equal "v", stack[:l1].get("own")
    assert_nil stack[:l1].get("stale")
  end

  # A fill on this host that read before another host's delete (issue 34, finding 5): it
  # writes bottom-up, so its SQL add is refused before any copy of it is in L1. (It used to
  # add to L1 first and serve the value until the SQL add was refused.)
  def test_a_fill_that_read_before_another_hosts_delete_is_never_in_l1
    l1, slow, stack, poller = filling_host
    other, = driven("other")
    other.set("k", "old")
    poller.round
    fill = stack.read_through("k")
    assert_equal "old", fill.get, "from SQL, under the host lock"
    fill = stack.read_through("missing")
    assert_nil fill.get

    other.set("missing", "newer") # another host's write, after the read
    reached, release = slow.pause_after(:add_for_fill)
    setter = Thread.new { fill.set(Strata::Entry.encode("computed before the write", expires_at: 0), ttl: 60) }
    assert reached?(reached, setter), "the fill reached its SQL add"
    assert_nil l1.get("missing"), "no copy in L1 while the SQL add is under way"
    release << true
    refute setter.value, "refused: a newer value is there"
    fill.finish
    assert_nil l1.get("missing")
    poller.round
    assert_equal "newer", stack.get("missing")
  end

  # Another host's delete that lands after the fill's SQL add and before its L1 add: the
  # poller applies the delete's row by deleting the key here too, held or not, which marks the
  # fill's lock; the L1 add is refused, and the value the delete removed is not served.
  def test_a_fill_committed_below_before_another_hosts_delete_adds_nothing_to_l1
    l1, slow, stack, poller = filling_host
    other, = driven("other")
    poller.round
    fill = stack.read_through("k")
    assert_nil fill.get, "a miss: this caller computes, holding the host lock"

    reached, release = slow.pause_after(:add_for_fill)
    setter = Thread.new { fill.set(Strata::Entry.encode("computed before the delete", expires_at: 0), ttl: 60) }
    assert reached?(reached, setter), "the fill's SQL add is done"
    other.delete("k") # another host's delete, after the fill's SQL add
    poller.round
    release << true
    setter.join(5)
    fill.finish
    assert_nil l1.get("k"), "the L1 add was refused"
    assert_nil stack.get("k")
  end

  def test_a_fresh_l1_is_not_cleared_by_the_first_round
    cache = host
    cache.write("k", "v") # at once: the first round may not have run yet
    assert wait_until(BOUND) { poller_of(cache).last_seen }
    refute_nil cache.stack[:l1].get(tier_key(cache, "k")), "L1 keeps what was written since the store opened it"
  end

  # An id skipped past is read again each round until it appears, or for gap_timeout (a
  # rolled-back transaction's id never does).
  def test_a_gap_is_read_again_until_it_fills_or_times_out
    stack, poller = driven
    poller.round
    head = stack[:l3].log_head
    log = Strata::Tiers::SQL::Schema.log_table("strata_entries")
    insert = ->(id, key) { execute("INSERT INTO #{log} (id, created_at, key) VALUES (#{id}, #{Strata::Entry.now}, x'#{key.unpack1("H*")}')") }
    insert.call(head + 3, "c")
    poller.round
    assert_equal [head + 1, head + 2], gaps(stack)
    stack[:l1].set("b", "stale")
    insert.call(head + 2, "b")
    poller.round
    assert_nil stack[:l1].get("b"), "the row that filled a gap is applied"
    assert_equal [head + 1], gaps(stack)

    later = Strata::Entry.now + 11_000
    Strata::Entry.stub(:now, later) { poller.round }
    assert_empty gaps(stack), "after gap_timeout it counts as rolled back"
    assert_equal head + 3, poller.last_seen
  end

  def test_a_forked_child_runs_its_own_poller_thread
    cache = host
    parent_thread = poller_of(cache).instance_variable_get(:@thread)
    pid = fork_child do
      thread = poller_of(cache).instance_variable_get(:@thread)
      thread.alive? && !thread.equal?(parent_thread)
    end
    assert reap(pid, DEADLINE)&.success?
    assert parent_thread.alive?
    # So Puma's preload_app! (7 and later) does not warn of it as a thread lost in the fork.
    assert parent_thread.thread_variable_get(:fork_safe)
  end

  # A holder that a notification can wake reads between notifications every LISTENING_INTERVAL
  # (never more often than poll_interval, nor less often than twice per vouching time); one that
  # cannot, every poll_interval; one that keeps something unsettled, every DEFAULT_INTERVAL.
  def test_a_listening_holder_waits_longer_between_rounds
    listener = Object.new
    pause = ->(cache, with) { poller_of(cache).send(:pause, with) }
    cache = host
    assert_equal Strata::Poller::LISTENING_INTERVAL, pause.call(cache, listener)
    assert_equal Strata::Poller::DEFAULT_INTERVAL, pause.call(cache, nil)
    slow = host(l1_path: File.join(@tmpdir, "slow.l1"), poll_interval: 2)
    assert_equal 2.0, pause.call(slow, listener)
    short = host(l1_path: File.join(@tmpdir, "short.l1"), coherence_interval: 0.4)
    assert_equal 0.2, pause.call(short, listener)
    poller_of(cache).instance_variable_get(:@unsettled)["k"] = true
    assert_equal Strata::Poller::DEFAULT_INTERVAL, pause.call(cache, listener)
  ensure
    poller_of(cache)&.instance_variable_get(:@unsettled)&.clear
  end

  # A listener that fails ends the wait after one slice, reported: the holder reads the log at
  # once and every poll_interval until it listens again, instead of trusting a dead connection.
  def test_a_failing_listener_ends_the_wait
    poller = poller_of(host)
    listener = FailingListener.new
    poller.instance_variable_set(:@listener, listener)
    reports = capture_reports { poller.send(:wait, listener, 60) }
    assert_equal 1, listener.waits
    assert_nil poller.instance_variable_get(:@listener)
    assert_equal 1, reports.size
  end

  # A Tiers::SQL::Listener whose connection fails.
  class FailingListener
    attr_reader :waits

    def initialize
      @waits = 0
    end

    def wait(_seconds)
      @waits += 1
      raise Strata::TierError.new("Strata L3 listener: connection lost", tier: :l3)
    end
  end

  # Active Record discards the parent's connections in a ForkTracker callback; the poller
  # starts again only after the last of them, so its thread never reaches one of those.
  def test_a_forked_childs_poller_starts_after_every_fork_tracker_callback
    cache = host
    parent_thread = poller_of(cache).instance_variable_get(:@thread)
    seen = nil
    last = ActiveSupport::ForkTracker.after_fork { seen = poller_of(cache).instance_variable_get(:@thread) }
    pid = fork_child { seen.equal?(parent_thread) && !poller_of(cache).instance_variable_get(:@thread).equal?(parent_thread) }
    assert reap(pid, DEADLINE)&.success?, "the poller was still the parent's when the last callback ran, and restarted after it"
  ensure
    ActiveSupport::ForkTracker.unregister(last) if last
  end

  def test_a_failing_round_is_reported_once_and_the_poller_keeps_going
    cache = host
    reports = capture_reports do
      assert wait_until(BOUND) { poller_of(cache).last_seen }
      sql = cache.stack[:l3]
      sql.connection_class.connection_pool.with_connection { |c| c.drop_table("strata_entries_log") }
      assert wait_until(BOUND) { cache.stats[:failures].values.sum >= 3 }, "rounds fail"
      Strata::Tiers::SQL.create_table!(sql.connection_class)
      cache.write("k", "v")
      cache.stack[:l1].set(tier_key(cache, "k"), "stale")
      assert wait_until(BOUND) { cache.stack[:l1].get(tier_key(cache, "k")).nil? }, "the poller goes on"
    end
    assert_equal 1, reports.size, reports.map { |report| report[:error].message }.inspect
  end

  # A process that never closes its store still ends: the thread does not hold it.
  def test_the_thread_never_keeps_a_process_alive
    script = <<~RUBY
      require "active_support/cache/strata_store"
      dir = ARGV[0]
      cache = ActiveSupport::Cache::StrataStore.new(l1: {path: File.join(dir, "alive.l1"), size: 1 << 20},
        sql: {path: File.join(dir, "alive.sqlite3"), invalidation_log: true})
      # Until its first round the state is FRESH (-1), which is truthy: wait for a place in the log.
      sleep 0.01 until (cache.engine.poller.last_seen || Strata::Poller::FRESH) > Strata::Poller::FRESH
    RUBY
    pid = Process.spawn(RbConfig.ruby, "-I#{File.expand_path("../lib", __dir__)}", "-e", script, @tmpdir)
    status = reap(pid, DEADLINE) || kill_and_reap(pid, DEADLINE)
    assert status&.success?, "the process ended by itself: #{status.inspect}"
  end

  def test_close_stops_the_thread
    cache = host
    thread = poller_of(cache).instance_variable_get(:@thread)
    cache.close
    refute thread.alive?
  end
end
