# frozen_string_literal: true

require "test_helper"
require "securerandom"
require "strata/stack"
require "strata/tiers/memcached"

# Stack read-through (Strata::SingleFlight) over a real host table and the test memcacheds. Each
# interleaving is driven step by step from the test, not by sleeps.
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
    fill = @stack.fill_for(@key)
    assert_nil @stack.get(@key, nil, fill)
    assert_predicate fill, :lease_pending?
    assert fill.host_lock

    assert @stack.set(@key, entry("v"), ttl: 60, fill: fill)
    @stack.finish(fill)
    assert_equal entry("v"), @l1.get(@key)
    assert_equal entry("v"), @l2.get(@key)
    assert_nil fill.host_lock
    assert_equal [@key], @stack.keys, "the host lock is gone and never listed"
    assert_empty @errors
  end

  # After the caller's own probe of the host table (fill_for(key, true)), the read-through skips
  # its first read there. A value that lands in the table between the probe and the read-through
  # is still found: the host single-flight reads the table again once it holds the lock.
  def test_a_probed_read_through_still_finds_a_value_written_after_the_probe
    assert_nil @stack.get_host(@key)
    @l1.set(@key, entry("landed after the probe"))
    fill = @stack.fill_for(@key, true)
    assert_equal entry("landed after the probe"), @stack.get(@key, nil, fill)
    refute_predicate fill, :lease_pending?, "found on the host: memcached is never asked"
    @stack.finish(fill)
    assert_nil fill.host_lock
    assert_equal [@key], @stack.keys
    assert_empty @errors
  end

  # get_host reads nothing when the host table is not the top tier, so there is no probe to skip.
  def test_a_probed_read_through_reads_a_host_table_that_is_not_on_top
    below = stack({l2: @l2, l1: @l1})
    @l1.set(@key, entry("host"))
    assert_nil below.get_host(@key)
    fill = below.fill_for(@key, true)
    refute fill.host_read
    assert_equal entry("host"), below.get(@key, nil, fill) # memcached's lease first, then the table
    below.finish(fill)
  end

  # The stale-fill property through the whole stack: A takes the lease, the key is invalidated
  # while A computes, then A's fill arrives. It must not land in any tier.
  def test_a_fill_that_took_its_lease_before_an_invalidate_is_dropped_everywhere
    @stack.set(@key, entry("old"), ttl: 60)
    @l1.delete(@key) # host A has not seen it yet
    fill = @stack.fill_for(@key)
    assert_equal entry("old"), @stack.get(@key, nil, fill), "a fresh value is a plain hit"
    @stack.finish(fill)

    @l2.invalidate(@key)
    @l1.delete(@key)
    fill = @stack.fill_for(@key)
    assert_nil @stack.get(@key, nil, fill), "the first reader after the invalidate refills"
    assert_predicate fill, :lease_pending?

    @stack.invalidate(@key) # a second change lands while A computes

    refute @stack.set(@key, entry("computed before the change"), ttl: 60, fill: fill)
    @stack.finish(fill)
    assert_nil @l1.get(@key), "the host table dropped the refused fill"

    # (No plain get of memcached here: any mg of a stale item takes its refill win.)
    refill = @stack.fill_for(@key)
    assert_nil @stack.get(@key, nil, refill), "memcached kept the invalidation: the next reader wins the refill"
    assert @stack.set(@key, entry("new"), ttl: 60, fill: refill)
    @stack.finish(refill)
    assert_equal entry("new"), @l2.get(@key)
    assert_equal entry("new"), @l1.get(@key)
  end

  def test_a_reader_that_lost_the_lease_is_served_the_stale_value_and_keeps_it_out_of_l1
    @l2.set(@key, entry("old"), ttl: 60)
    @l2.invalidate(@key)
    winner = stack({l2: @l2}).fill_for(@key)
    winner_stack = winner.owner
    assert_nil winner_stack.get(@key, nil, winner)

    loser = @stack.fill_for(@key)
    info = {}
    assert_equal entry("old"), @stack.get(@key, info, loser)
    assert info[:stale]
    assert_equal :l2, info[:tier]
    assert_nil @l1.get(@key), "a stale value is not copied up"
    @stack.finish(loser)
    winner_stack.finish(winner)
  end

  def test_a_lease_loser_with_nothing_to_serve_waits_for_the_winners_value
    winner = stack({l2: @l2}).fill_for(@key)
    winner_stack = winner.owner
    assert_nil winner_stack.get(@key, nil, winner)

    waiting = polling_reader(@stack)
    assert winner_stack.set(@key, entry("winner's"), ttl: 60, fill: winner)
    winner_stack.finish(winner)

    value, loser = waiting.value
    assert_equal entry("winner's"), value
    refute_predicate loser, :lease_pending?
    assert_equal entry("winner's"), @l1.get(@key), "the waiter backfilled its host table"
  end

  def test_a_filler_that_stores_nothing_frees_the_key_for_the_next_reader
    fill = @stack.fill_for(@key)
    assert_nil @stack.get(@key, nil, fill)
    @stack.finish(fill) # the block raised, or returned nil with skip_nil

    other_host = stack({l1: l1_table("host-b"), l2: @l2}, fill_wait: 30)
    next_fill = other_host.fill_for(@key)
    assert_nil other_host.get(@key, nil, next_fill), "no 30 s wait: the lease was given back"
    assert_predicate next_fill, :lease_pending?
    other_host.finish(next_fill)
  end

  def test_host_single_flight_one_process_fills_the_others_wait_for_it
    host = stack({l1: @l1})
    holder = host.fill_for(@key)
    assert_nil host.get(@key, nil, holder)
    assert holder.host_lock

    waiting = polling_reader(host)
    assert host.set(@key, entry("holder's"), ttl: 60, fill: holder)
    host.finish(holder)

    value, fill = waiting.value
    assert_equal entry("holder's"), value
    assert_nil fill.host_lock
  end

  def test_when_the_lock_holder_gives_up_a_waiter_takes_over
    host = stack({l1: @l1})
    holder = host.fill_for(@key)
    assert_nil host.get(@key, nil, holder)

    waiting = Thread.new do
      fill = host.fill_for(@key)
      [host.get(@key, nil, fill), fill.host_lock]
    end
    wait_for_polling(waiting)
    host.finish(holder) # its block raised

    value, lock = waiting.value
    assert_nil value, "the waiter computes"
    assert lock, "holding the lock now"
  end

  def test_a_waiter_computes_itself_after_fill_wait_and_never_deadlocks
    host = stack({l1: @l1}, fill_wait: 0.05)
    holder = host.fill_for(@key)
    assert_nil host.get(@key, nil, holder)

    fill = host.fill_for(@key)
    assert_nil host.get(@key, nil, fill), "gives up waiting (or takes the lock once it lapses) and computes"
    host.finish(fill)
    host.finish(holder)
  end

  def test_a_lease_loser_that_waited_too_long_computes_but_writes_nothing
    winner = stack({l2: @l2}).fill_for(@key)
    assert_nil winner.owner.get(@key, nil, winner)

    impatient = stack({l2: @l2}, fill_wait: 0.05)
    fill = impatient.fill_for(@key)
    assert_nil impatient.get(@key, nil, fill)
    assert_predicate fill, :unleased
    refute impatient.set(@key, entry("unleased"), ttl: 60, fill: fill)
    assert_nil @l2.get(@key), "the winner's lease is untouched"
    assert winner.owner.set(@key, entry("winner's"), ttl: 60, fill: winner)
    assert_equal entry("winner's"), @l2.get(@key)
  end

  def test_fill_wait_zero_is_a_plain_read
    plain = stack({l1: @l1, l2: @l2}, fill_wait: 0)
    fill = plain.fill_for(@key)
    assert_nil plain.get(@key, nil, fill)
    refute_predicate fill, :lease_pending?
    assert_nil fill.host_lock
    assert plain.set(@key, entry("v"), ttl: 60, fill: fill)
    assert_equal entry("v"), @l2.get(@key)
  end

  def test_memcached_down_the_host_tier_still_single_flights
    down = Strata::Tiers::Memcached.new(servers: ["127.0.0.1:1"], connect_timeout: 0.2, timeout: 0.2)
    host = stack({l1: @l1, l2: down})
    fill = host.fill_for(@key)
    assert_nil host.get(@key, nil, fill)
    assert fill.host_lock
    assert host.set(@key, entry("v"), ttl: 60, fill: fill)
    host.finish(fill)
    assert_equal entry("v"), @l1.get(@key)
    assert(@errors.any? { |_, tier| tier == :l2 }, "the failure was reported")
  ensure
    down&.close
  end

  private

  # A reader of @key through stack, in a thread of its own, parked in its poll. The thread's value
  # is [what the read returned, its Fill], the fill finished.
  def polling_reader(stack)
    thread = Thread.new do
      fill = stack.fill_for(@key)
      [stack.get(@key, nil, fill), fill]
    ensure
      stack.finish(fill) if fill
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
