# frozen_string_literal: true

require "test_helper"
require "securerandom"
require "support/child_processes"
require "support/pausing_tier"
require "strata/stack"
require "strata/tiers/memcached"
require "strata/tiers/sql"

# Stack#read_through (its Strata::ReadThrough, over Strata::SingleFlight) on a real host table and the
# test memcacheds. Each interleaving is driven step by step from the test, not by sleeps.
class SingleFlightTest < Minitest::Test
  Entry = Strata::Entry

  def run
    Strata::TestSupport.with_tmpdir do |dir|
      @dir = dir
      @errors = []
      @l1 = l1_table("host-a")
      @l2 = Strata::Tiers::Memcached.new(servers: Strata::TestSupport.memcached_servers, timeout: 2)
      @stack = stack({l1: @l1, l2: @l2})
      @key = "sf-#{SecureRandom.hex(6)}"
      super
    ensure
      @l1&.close
      @l2&.close
    end
  end

  def l1_table(name)
    Strata::Tiers::SharedMemory.new(path: File.join(@dir, name), size: 1 << 20)
  end

  def stack(tiers, fill_wait: 5)
    Strata::Stack.new(tiers, on_error: ->(error, tier) { @errors << [error.class, tier] }, fill_wait: fill_wait)
  end

  def entry(payload)
    Entry.encode(payload, flags: Entry::UTF8, expires_at: 0)
  end

  def test_a_miss_everywhere_makes_the_caller_the_filler_and_its_fill_reaches_every_tier
    fill = @stack.read_through(@key)
    assert_nil fill.get
    assert_predicate fill, :lease_pending?
    assert fill.host_lock

    assert fill.set(entry("v"), ttl: 60)
    fill.finish
    assert_equal entry("v"), @l1.get(@key)
    assert_equal entry("v"), @l2.get(@key)
    assert_nil fill.host_lock
    assert_equal [@key], @stack.keys, "the host lock is gone and never listed"
    assert_empty @errors
  end

  # With a block, the read-through is finished however the block ends: a block that raised gives
  # back the host lock and the lease at once, so the next reader (here on another host, which
  # would otherwise wait 30 s) wins the lease.
  def test_a_block_read_through_gives_back_its_lock_and_lease_when_the_block_raises
    held = nil
    error = assert_raises(RuntimeError) do
      @stack.read_through(@key) do |fill|
        held = fill
        assert_nil fill.get
        assert_predicate fill, :lease_pending?
        raise "the block failed"
      end
    end
    assert_equal "the block failed", error.message
    assert_nil held.host_lock
    refute_predicate held, :lease_pending?
    assert_empty @stack.keys, "the host lock is gone"

    other_host = stack({l1: l1_table("host-b"), l2: @l2}, fill_wait: 30)
    won = other_host.read_through(@key) do |fill|
      assert_nil fill.get
      fill.lease_pending?
    end
    assert won, "the block's value is read_through's"
    assert_empty @errors
  end

  # The read-through reads the tiers once; later gets give that answer, until the caller itself
  # writes or deletes the key (as Rails does to put a stale entry back): then they read the tiers.
  # A write after a read that found a value is a plain write, not a fill.
  def test_get_answers_from_its_first_read_until_the_caller_writes_or_deletes_the_key
    @stack.set(@key, entry("old"), ttl: 60)
    @stack.read_through(@key) do |fill|
      assert_equal entry("old"), fill.get
      @l1.set(@key, entry("changed under it"))
      assert_equal entry("old"), fill.get, "the same answer, unread"
      assert fill.delete
      assert_nil fill.get, "after its own delete, the tiers as they are"
      assert fill.set(entry("put back"), ttl: 60)
      assert_equal entry("put back"), fill.get
      refute fill.add(entry("not over it"), ttl: 60)
    end
    assert_equal entry("put back"), @l1.get(@key)
    assert_equal entry("put back"), @l2.get(@key)
    assert_empty @errors
  end

  # After the caller's own probe of the host table (read_through(key, true)), the read-through
  # skips its first read there. A value that lands in the table between the probe and the
  # read-through is still found: the host single-flight reads the table again under the lock.
  def test_a_probed_read_through_still_finds_a_value_written_after_the_probe
    assert_nil @stack.get_host(@key)
    @l1.set(@key, entry("landed after the probe"))
    fill = @stack.read_through(@key, true)
    assert_equal entry("landed after the probe"), fill.get
    refute_predicate fill, :lease_pending?, "found on the host: memcached is never asked"
    fill.finish
    assert_nil fill.host_lock
    assert_equal [@key], @stack.keys
    assert_empty @errors
  end

  # get_host reads nothing when the host table is not the top tier, so there is no probe to skip.
  def test_a_probed_read_through_reads_a_host_table_that_is_not_on_top
    below = stack({l2: @l2, l1: @l1})
    @l1.set(@key, entry("host"))
    assert_nil below.get_host(@key)
    fill = below.read_through(@key, true)
    refute fill.host_read
    assert_equal entry("host"), fill.get # memcached's lease first, then the table
    fill.finish
  end

  # The stale-fill property through the whole stack: A takes the lease, the key is invalidated
  # while A computes, then A's fill arrives. It must not land in any tier.
  def test_a_fill_that_took_its_lease_before_an_invalidate_is_dropped_everywhere
    @stack.set(@key, entry("old"), ttl: 60)
    @l1.delete(@key) # host A has not seen it yet
    fill = @stack.read_through(@key)
    assert_equal entry("old"), fill.get, "a fresh value is a plain hit"
    fill.finish

    @l2.invalidate(@key)
    @l1.delete(@key)
    fill = @stack.read_through(@key)
    assert_nil fill.get, "the first reader after the invalidate refills"
    assert_predicate fill, :lease_pending?

    @stack.invalidate(@key) # a second change lands while A computes

    refute fill.set(entry("computed before the change"), ttl: 60)
    fill.finish
    assert_nil @l1.get(@key), "the host table dropped the refused fill"

    # (No plain get of memcached here: any mg of a stale item takes its refill win.)
    refill = @stack.read_through(@key)
    assert_nil refill.get, "memcached kept the invalidation: the next reader wins the refill"
    assert refill.set(entry("new"), ttl: 60)
    refill.finish
    assert_equal entry("new"), @l2.get(@key)
    assert_equal entry("new"), @l1.get(@key)
  end

  def test_a_reader_that_lost_the_lease_is_served_the_stale_value_and_keeps_it_out_of_l1
    @l2.set(@key, entry("old"), ttl: 60)
    @l2.invalidate(@key)
    winner = stack({l2: @l2}).read_through(@key)
    assert_nil winner.get

    loser = @stack.read_through(@key)
    info = {}
    assert_equal entry("old"), loser.get(info)
    assert info[:stale]
    assert_equal :l2, info[:tier]
    assert_nil @l1.get(@key), "a stale value is not copied up"
    loser.finish
    winner.finish
  end

  def test_a_lease_loser_with_nothing_to_serve_waits_for_the_winners_value
    winner = stack({l2: @l2}).read_through(@key)
    assert_nil winner.get

    waiting = polling_reader(@stack)
    assert winner.set(entry("winner's"), ttl: 60)
    winner.finish

    value, loser = waiting.value
    assert_equal entry("winner's"), value
    refute_predicate loser, :lease_pending?
    assert_equal entry("winner's"), @l1.get(@key), "the waiter backfilled its host table"
  end

  def test_a_filler_that_stores_nothing_frees_the_key_for_the_next_reader
    fill = @stack.read_through(@key)
    assert_nil fill.get
    fill.finish # the block raised, or returned nil with skip_nil

    other_host = stack({l1: l1_table("host-b"), l2: @l2}, fill_wait: 30)
    next_fill = other_host.read_through(@key)
    assert_nil next_fill.get, "no 30 s wait: the lease was given back"
    assert_predicate next_fill, :lease_pending?
    next_fill.finish
  end

  def test_host_single_flight_one_process_fills_the_others_wait_for_it
    host = stack({l1: @l1})
    holder = host.read_through(@key)
    assert_nil holder.get
    assert holder.host_lock

    waiting = polling_reader(host)
    assert holder.set(entry("holder's"), ttl: 60)
    holder.finish

    value, fill = waiting.value
    assert_equal entry("holder's"), value
    assert_nil fill.host_lock
  end

  def test_when_the_lock_holder_gives_up_a_waiter_takes_over
    host = stack({l1: @l1})
    holder = host.read_through(@key)
    assert_nil holder.get

    waiting = Thread.new do
      fill = host.read_through(@key)
      [fill.get, fill.host_lock]
    end
    wait_for_polling(waiting)
    holder.finish # its block raised

    value, lock = waiting.value
    assert_nil value, "the waiter computes"
    assert lock, "holding the lock now"
  end

  def test_a_waiter_computes_itself_after_fill_wait_and_never_deadlocks
    host = stack({l1: @l1}, fill_wait: 0.05)
    holder = host.read_through(@key)
    assert_nil holder.get

    fill = host.read_through(@key)
    assert_nil fill.get, "gives up waiting (or takes the lock once it lapses) and computes"
    fill.finish
    holder.finish
  end

  def test_a_lease_loser_that_waited_too_long_computes_but_writes_nothing
    winner = stack({l2: @l2}).read_through(@key)
    assert_nil winner.get

    impatient = stack({l2: @l2}, fill_wait: 0.05)
    fill = impatient.read_through(@key)
    assert_nil fill.get
    assert_predicate fill, :unleased
    refute fill.set(entry("unleased"), ttl: 60)
    assert_nil @l2.get(@key), "the winner's lease is untouched"
    assert winner.set(entry("winner's"), ttl: 60)
    assert_equal entry("winner's"), @l2.get(@key)
  end

  # The key's lock word is another key's fill's (ext/strata/fill_locks.h: two keys, one word):
  # no lock to be had, so the caller fills without one, as a host without single-flight would.
  def test_a_key_whose_lock_word_another_fill_holds_is_filled_unlocked
    host = stack({l1: @l1})
    held = []
    # Bound: 8,192 lock words; a key's word is another's after about that many keys.
    200_000.times do |i|
      break if held.size > 0 && (token = @l1.lock_fill(@key, 60)).nil?

      @l1.unlock_fill(@key, token) if token
      other = "other-#{i}"
      held << [other, @l1.lock_fill(other, 60)]
    end
    assert_nil @l1.lock_fill(@key, 60), "some other key holds this key's lock word"

    fill = host.read_through(@key)
    assert_nil fill.get, "computes"
    assert_nil fill.host_lock, "without a lock"
    assert fill.set(entry("unlocked"), ttl: 60)
    fill.finish
    assert_equal entry("unlocked"), @l1.get(@key)
    assert_empty @errors
  ensure
    held&.each { |other, token| @l1.unlock_fill(other, token) if token }
  end

  def test_fill_wait_zero_is_a_plain_read
    plain = stack({l1: @l1, l2: @l2}, fill_wait: 0)
    fill = plain.read_through(@key)
    assert_nil fill.get
    refute_predicate fill, :lease_pending?
    assert_nil fill.host_lock
    assert fill.set(entry("v"), ttl: 60)
    assert_equal entry("v"), @l2.get(@key)
  end

  def test_memcached_down_the_host_tier_still_single_flights
    down = Strata::Tiers::Memcached.new(servers: ["127.0.0.1:1"], connect_timeout: 0.2, timeout: 0.2)
    host = stack({l1: @l1, l2: down})
    fill = host.read_through(@key)
    assert_nil fill.get
    assert fill.host_lock
    assert fill.set(entry("v"), ttl: 60)
    fill.finish
    assert_equal entry("v"), @l1.get(@key)
    assert(@errors.any? { |_, tier| tier == :l2 }, "the failure was reported")
  ensure
    down&.close
  end

  # An SQL tier whose fenced add fails as the fill writes (its path cut, a statement timeout):
  # it cannot say whether a delete came since the read, so the copy already written above it
  # goes too, and the fill is not kept.
  class FailingAdds < Strata::Tiers::SQL
    def add_for_fill(*)
      raise Strata::TierError.new("statement timeout", tier: :l3)
    end
  end

  def test_a_fill_whose_fenced_tier_fails_takes_its_copies_back
    sql = FailingAdds.new(path: File.join(@dir, "l3.sqlite3"))
    stack = stack({l1: @l1, l3: sql})
    fill = stack.read_through(@key)
    assert_nil fill.get

    refute fill.set(entry("v"), ttl: 60), "not kept"
    fill.finish
    assert_nil @l1.get(@key), "no copy above the tier that failed"
    assert_equal [[Strata::TierError, :l3]], @errors
  ensure
    sql&.close
  end

  # L1 alone: a delete made by another process while this one fills the key (it read nothing
  # and computed from what the delete replaced) wins: the fill's add is refused, and the key
  # stays missing. With no change meanwhile, the fill is kept.
  def test_with_l1_alone_a_delete_during_another_processs_fill_wins
    stack = stack({l1: @l1})
    fill = stack.read_through(@key)
    assert_nil fill.get
    assert fill.host_lock

    pid = Strata::TestSupport::ChildProcesses.fork_child { l1_table("host-a").delete(@key) || true }
    assert Strata::TestSupport::ChildProcesses.reap(pid, 10)&.success?, "the other process deleted the key"
    refute fill.set(entry("computed before the delete"), ttl: 60), "refused"
    fill.finish
    assert_nil @l1.get(@key)

    fill = stack.read_through(@key)
    assert_nil fill.get
    assert fill.set(entry("v"), ttl: 60)
    fill.finish
    assert_equal entry("v"), @l1.get(@key)
    assert_empty @errors
  end

  # A reader that finds the value in memcached under the host lock copies it into L1 fenced by
  # the lock, as a fill is: a delete on this host between its read and its copy refuses the
  # copy. Unfenced, the host's other processes would read the deleted value until the reader's
  # settle took it back, and for its TTL were the reader killed before.
  def test_a_copy_from_memcached_under_the_host_lock_gives_way_to_a_delete_since_its_read
    value = read_across_a_delete(:lease_get) do |stack|
      fill = stack.read_through(@key)
      fill.get
    ensure
      fill&.finish
    end
    assert_equal entry("old"), value, "the reader answers what it read"
    assert_nil @l1.get(@key)
    assert_empty @errors
  end

  # A plain read (Stack#get) that misses L1 reads below under the host lock, and its copy into
  # L1 is fenced by it: a delete between its read and its copy refuses the copy.
  def test_a_plain_reads_copy_into_l1_gives_way_to_a_delete_since_its_read
    stack = nil
    value = read_across_a_delete(:get) do |paused|
      stack = paused
      paused.get(@key)
    end
    assert_equal entry("old"), value, "the reader answers what it read"

    assert @l2.set(@key, entry("new"), ttl: 60)
    assert_equal entry("new"), stack.get(@key)
    assert_equal entry("new"), @l1.get(@key), "with no change meanwhile, the copy is made"
    fill = stack.read_through("#{@key}-next")
    assert_nil fill.get
    assert fill.host_lock, "the plain reads gave their locks back"
    fill.finish
    assert_empty @errors
  end

  # While a fill holds the host lock, a plain read answers from below and leaves L1 to it.
  def test_a_plain_read_copies_nothing_into_l1_while_a_fill_holds_the_host_lock
    assert @l2.set(@key, entry("written"), ttl: 60)
    token = @l1.lock_fill(@key, 5) # another process's fill
    assert token

    assert_equal entry("written"), @stack.get(@key)
    assert_nil @l1.get(@key), "L1 is left to the fill"
    assert @l1.unlock_fill(@key, token)
    assert_equal entry("written"), @stack.get(@key)
    assert_equal entry("written"), @l1.get(@key)
    assert_empty @errors
  end

  private

  # memcached holds "old" under @key; a reader (the block, given a stack over @l1 and memcached)
  # reads it there, stopped after memcached's answer to operation. @key is deleted meanwhile;
  # when the reader then reads memcached back (its settle), L1 must hold no copy of "old". The
  # reader's answer.
  def read_across_a_delete(operation)
    l2 = Strata::TestSupport::PausingTier.new(@l2)
    stack = stack({l1: @l1, l2: l2})
    assert @l2.set(@key, entry("old"), ttl: 60)
    read, after_read = l2.pause_after(operation)
    reader = Thread.new { yield stack }
    read.pop # the reader read "old" (holding the host lock)
    assert @stack.delete(@key)

    settling, after_settle = l2.pause_after(:peek)
    after_read << true
    settling.pop # the reader copied what it read, and reads memcached back
    assert_nil @l1.get(@key), "L1 holds no copy of the deleted value"
    after_settle << true
    reader.value
  ensure
    [after_read, after_settle].each { |queue| queue&.push(true) }
    reader&.join(5)
  end

  # A reader of @key through stack, in a thread of its own, parked in its poll. The thread's value
  # is [what the read returned, its ReadThrough], which is finished.
  def polling_reader(stack)
    thread = Thread.new do
      fill = stack.read_through(@key)
      [fill.get, fill]
    ensure
      fill&.finish
    end
    wait_for_polling(thread)
    thread
  end

  # Until thread is asleep in a poll: it has read, missed and is waiting.
  def wait_for_polling(thread)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 5
    Thread.pass until thread.status == "sleep" || !thread.alive? || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    assert_equal "sleep", thread.status, "the other caller is waiting"
  end
end
