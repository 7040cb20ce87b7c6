# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "socket"

# StrataStore#stats[:counters]: the host's counters (Strata::Counters) as the store adds to them,
# per tier, per store and per operation; and the :stale and :waited keys of the read events.
class StrataStoreHostCountersTest < Strata::StoreCase
  DEADLINE = 5

  def test_operations_fills_and_invalidations_are_counted
    store.write("a", 1)
    store.write_multi("b" => 2, "c" => 3)
    assert_equal 1, store.read("a")
    assert_nil store.read("absent")
    assert_equal 4, store.fetch("d") { 4 }
    assert_equal 4, store.fetch("d") { flunk "a hit runs no block" }
    store.delete("a")
    store.invalidate_tags("t1", "t2")

    counters = store.stats[:counters]
    operations = counters[:store][:operations]
    assert_equal [2, 1, 4, 1], %i[read_hit fetch_miss write delete].map { |op| operations[op][:count] }
    assert_equal [0, 1, 4, 1], %i[read_hit fetch_miss write delete].map { |op| operations[op][:timed] },
      "hits answered from the table are counted, not timed"
    assert_equal [1, 2, 1], counters[:store].values_at(:fills, :versions_bumped, :invalidations)
    l1 = counters[:tiers][:l1]
    assert_equal [2, 2, 4, 1], l1.values_at(:hits, :misses, :writes, :deletes),
      "a miss is counted once: the probe before it counts hits only"
    assert_equal 0.5, l1[:hit_ratio]
    assert counters[:shared]
  end

  # A write the table could not make (its shard lock held past lock_timeout) is a refused
  # write and a timeout in the L1 row; the value too large for the table, a refused write.
  def test_l1_counts_refused_writes_and_timeouts
    table = open_table
    with_shard_locked(table, tier_key(store, "k")) do
      capture_reports { store.write("k", "v") }
    end
    capture_reports { store.write("big", "x" * (TABLE_SIZE / 2)) }

    l1 = store.stats[:counters][:tiers][:l1]
    assert_equal [0, 2, 1, 0, 0], l1.values_at(:writes, :writes_refused, :errors_timeout, :errors_connection, :errors_other)
  end

  # Another handle on the table, as another process would open it, reads the same figures.
  def test_the_table_reads_the_figures_every_process_adds_to
    store.write("a", 1)
    other = build_store
    other.write("b", 2)
    other.read("a")

    assert_equal store.stats[:counters].except(:shared), open_table.counters
    assert_equal [2, 1], open_table.counters[:tiers][:l1].values_at(:writes, :hits)
  end

  def test_the_sql_tier_counts_its_reads_writes_and_deletes
    cache = build_store(sql: {path: File.join(@tmpdir, "cache.sqlite3")})
    cache.write("k", "v")
    open_table.delete(tier_key(cache, "k")) # only SQL has it now
    assert_equal "v", cache.read("k")
    assert_nil cache.read("absent")
    cache.delete("k")

    sql = cache.stats[:counters][:tiers][:sql]
    assert_equal [1, 1, 1, 1], sql.values_at(:hits, :misses, :writes, :deletes)
  end

  # Without an L1 table there is no file to share: the figures are this process's, per store.
  def test_a_store_without_l1_counts_for_itself_and_memcached_errors_by_kind
    down = ActiveSupport::Cache::StrataStore.new(namespace: "hc-#{SecureRandom.hex(4)}", fill_wait: 0,
      memcached: {servers: ["127.0.0.1:#{closed_port}"], connect_timeout: 0.2})
    @stores << down
    capture_reports do
      down.read("k")
      down.read("k") # the server is marked down now: "no memcached server is up"
    end

    counters = down.stats[:counters]
    refute counters[:shared]
    memcached = counters[:tiers][:memcached]
    assert_equal 2, memcached[:errors_connection], "a refused connection, then no server up"
    assert_equal [0, 0, 0, 0], memcached.values_at(:hits, :misses, :errors_timeout, :errors_other)
    assert_equal 0, store.stats[:counters][:tiers][:memcached][:errors_connection], "another store's figures"
  end

  # A fetch that waits for another caller's fill (the host lock) says so: cache_read and
  # cache_fetch_hit carry waited: (seconds), and lock_waits counts it. The wait is driven step
  # by step through the read-through's pause between polls.
  def test_a_fetch_that_waited_on_the_host_lock_says_so
    filling = Queue.new
    finish = Queue.new
    holder = Thread.new do
      store.fetch("k") do
        filling << true
        finish.pop
      end
    end
    filling.pop
    polled = Queue.new
    go_on = Queue.new
    flight = store.stack.instance_variable_get(:@single_flight)
    flight.define_singleton_method(:pause) do |interval|
      polled << true
      go_on.pop
      interval
    end
    read = fetch_hit = nil
    waiter = Thread.new do
      fetch_hit = capture_events("cache_fetch_hit.active_support") do
        read = capture_events("cache_read.active_support") { Thread.current[:value] = store.fetch("k") { "mine" } }
      end
    end
    polled.pop # the waiter found the lock held and paused
    finish << "filled"
    assert_equal "filled", holder.value
    go_on << true
    waiter.join(DEADLINE)

    assert_equal "filled", waiter[:value]
    assert_operator read.first[:waited], :>, 0
    assert_equal read.first[:waited], fetch_hit.first[:waited]
    refute read.first.key?(:stale)
    waits = store.stats[:counters][:store]
    assert_equal 1, waits[:lock_waits]
    assert_operator waits[:lock_wait_us], :>, 0
  ensure
    finish&.push("filled")
    go_on&.push(true)
    [holder, waiter].each { |thread| thread&.join(DEADLINE) }
  end

  # fetch_multi reads its misses through as fetch does: its cache_read_multi carries waited:.
  def test_a_fetch_multi_that_waited_on_the_host_lock_says_so
    filling = Queue.new
    finish = Queue.new
    holder = Thread.new do
      store.fetch("k") do
        filling << true
        finish.pop
      end
    end
    filling.pop
    polled = Queue.new
    go_on = Queue.new
    store.stack.instance_variable_get(:@single_flight).define_singleton_method(:pause) do |interval|
      polled << true
      go_on.pop
      interval
    end
    read = nil
    waiter = Thread.new do
      read = capture_events("cache_read_multi.active_support") do
        Thread.current[:values] = store.fetch_multi("k", "j") { |name| "#{name} computed" }
      end
    end
    polled.pop
    finish << "filled"
    holder.join(DEADLINE)
    go_on << true
    waiter.join(DEADLINE)

    assert_equal({"k" => "filled", "j" => "j computed"}, waiter[:values])
    assert_operator read.first[:waited], :>, 0
  ensure
    finish&.push("filled")
    go_on&.push(true)
    [holder, waiter].each { |thread| thread&.join(DEADLINE) }
  end

  # A reader on another host that lost memcached's lease to the refill of an invalidated key is
  # served the stale value: its cache_read and cache_fetch_hit say stale: true.
  def test_a_stale_value_served_while_another_host_refills_says_so
    namespace = "hc-#{SecureRandom.hex(4)}"
    hosts = 2.times.map do |n|
      build_store(l1: {path: File.join(@tmpdir, "host#{n}.l1")}, namespace: namespace, memcached: {servers: Strata::TestSupport::MEMCACHED_SERVERS})
    end
    hosts[0].write("k", "old")
    key = tier_key(hosts[0], "k")
    hosts[0].stack[:l2].invalidate(key)
    hosts.each { |host| host.stack[:l1].delete(key) }
    refilling = Queue.new
    finish = Queue.new
    winner = Thread.new do
      hosts[0].fetch("k") do
        refilling << true
        finish.pop
      end
    end
    refilling.pop

    read = nil
    fetch_hit = capture_events("cache_fetch_hit.active_support") do
      read = capture_events("cache_read.active_support") { assert_equal "old", hosts[1].fetch("k") { "loser" } }
    end
    finish << "new"
    winner.join(DEADLINE)

    assert read.first[:stale]
    assert fetch_hit.first[:stale]
    assert_equal 1, hosts[1].stats[:counters][:store][:stale_hits]
  ensure
    finish&.push("new")
    winner&.join(DEADLINE)
  end

  private

  def closed_port
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end
end
