# frozen_string_literal: true

require "test_helper"
require "securerandom"
require "socket"
require "strata/meta"
require "strata/counters"
require "support/waiting"
require "support/memcached_process"
require "support/memcached_helpers"
require "support/scripted_memcached"
require "support/fake_clock"

# Meta::Client through a memcached outage (issue 22, fault 1): a stalled server (SIGSTOP) is
# not marked down for one slow reply, and the changes made while it was down or in doubt are
# deleted on it before this process uses it again, so a key reads as what was written during the
# outage or a miss, never the copy from before, and a deleted key stays deleted. The ring's clock
# is the test's: retry_after passes when the test says so, not while a step is under way.
class MetaClientOutageTest < Minitest::Test
  include Strata::Waiting
  include Strata::TestSupport::MemcachedHelpers

  TIMEOUT = 0.3
  RETRY_AFTER = 10
  DEADLINE = 10

  FakeClock = Strata::TestSupport::FakeClock

  def setup
    @prefix = "outage-#{SecureRandom.hex(6)}-"
    @clock = FakeClock.new
    @processes = []
    @clients = []
    @primary = spawn_memcached
    @gutter = spawn_memcached
  end

  def teardown
    @clients.each(&:close)
    @processes.each(&:kill)
  end

  def test_one_timeout_fails_its_call_two_in_a_row_mark_the_server_down
    client = new_client
    key = key_on(client, @primary.server)
    assert client.set(key, "v1")

    @primary.pause
    assert_raises(Strata::RetryableError) { client.get(key) }
    assert client.ring.up?(@primary.server), "one slow reply fails only its own call"
    @primary.resume
    assert_equal "v1", client.get(key), "an answer starts the count again"

    @primary.pause
    assert_raises(Strata::RetryableError) { client.get(key) }
    assert client.ring.up?(@primary.server), "not two in a row: an answer came between"
    assert_raises(Strata::RetryableError) { client.get(key) }
    refute client.ring.up?(@primary.server), "the second timeout in a row marks it down"
    assert_equal 3, client.stats[:errors][@primary.server], "each timeout is counted"
  end

  def test_a_refused_connection_marks_the_server_down_at_once
    client = new_client
    key = key_on(client, @primary.server)
    assert client.set(key, "v1")
    @primary.kill

    assert_raises(Strata::TierError) { client.get(key) }
    refute client.ring.up?(@primary.server)
  end

  # The exact scenario: stall, write v2, delete, count, recover.
  def test_changes_during_an_outage_are_deleted_on_the_server_before_it_serves_again
    client = new_client
    written, deleted, counted, untouched = keys_on(client, @primary.server).first(4)
    [written, deleted, untouched].each { |key| assert client.set(key, "v1") }
    assert_equal 5, client.incr(counted, 5, initial: 5)

    stall(client)
    assert client.set(written, "v2"), "the write goes to the gutter"
    assert_equal "v2", client.get(written)
    error = assert_raises(Strata::TierError) { client.delete(deleted) }
    assert_equal @primary.server, error.server, "a delete that did not reach its server is reported, naming it"
    assert_match(/deleted on the gutter #{@gutter.server} only/, error.message)
    assert_nil client.get(deleted)
    assert_equal 1, client.incr(counted, 1, initial: 1), "the counter starts again in the gutter"
    assert_equal({@primary.server => 3}, client.stats[:recovery])

    recover(client, written)
    assert_nil client.get(written), "a miss, not v1 (the gutter's v2 was deleted with it)"
    assert_nil client.get(deleted), "the deleted key stays deleted"
    assert_nil client.incr(counted, 1), "the old counter is deleted, not resumed at 6"
    assert_equal "v1", client.get(untouched), "keys not changed during the outage keep their values"
    assert_empty client.stats[:recovery]
    gutter_only = new_client([@gutter.server])
    assert_nil gutter_only.get(written), "the gutter copy is deleted too"
    assert_nil gutter_only.get(counted)
  end

  # A write and a delete that time out are in doubt: the stopped server still has them buffered
  # and carries them out, in either order, once it runs again.
  def test_changes_that_timed_out_are_deleted_on_the_server_too
    client = new_client
    key = key_on(client, @primary.server)
    assert client.set(key, "v1")
    sets = server_stat(@primary.server, "cmd_set")
    deletes = deletes_on(@primary.server)

    @primary.pause
    assert_raises(Strata::RetryableError) { client.set(key, "v2") }
    assert client.ring.up?(@primary.server)
    assert_raises(Strata::RetryableError) { client.delete(key) }
    refute client.ring.up?(@primary.server), "two timeouts in a row"
    @primary.resume
    assert wait_until(DEADLINE) { server_stat(@primary.server, "cmd_set") > sets && deletes_on(@primary.server) > deletes },
      "the server carried out the buffered set and delete"

    recover(client, key)
    assert_nil client.get(key)
  end

  # With no server up nothing is routed anywhere: the refused changes are noted all the same.
  def test_a_change_refused_with_no_server_up_is_deleted_at_recovery
    client = new_client([@primary.server])
    key = "#{@prefix}only"
    assert client.set(key, "v1")
    stall(client)

    error = assert_raises(Strata::TierError) { client.set(key, "v2") }
    assert_equal @primary.server, error.server
    recover(client, key)
    assert_nil client.get(key)
  end

  # Counted too (Client#counts): what went to the gutter, and what the recovery deleted.
  def test_multi_key_changes_during_an_outage
    client = new_client
    counters = Strata::Counters.new
    client.counts = Strata::Counters::Row.new(counters, "memcached")
    on_primary = keys_on(client, @primary.server).first(3)
    on_gutter = keys_on(client, @gutter.server).first(2)
    (on_primary + on_gutter).each { |key| assert client.set(key, "v1") }

    stall(client)
    assert_equal on_primary.first(2).to_h { |key| [key, true] }, client.set_multi(on_primary.first(2).to_h { |key| [key, "v2"] })
    error = assert_raises(Strata::PartialError) { client.delete_multi([on_primary.last, *on_gutter]) }
    assert_equal @primary.server, error.server
    assert_equal on_gutter.sort, error.result.keys.sort, "what the keys' own servers answered; not the gutter's"

    assert_equal on_primary.first(2).to_h { |key| [key, "v2"] }, client.get_multi(on_primary), "read on the gutter"
    assert_equal [3, 2, 1, 0], outage_figures(counters).first(4)

    recover(client, on_primary.first)
    assert_empty client.get_multi(on_primary + on_gutter)
    # The three keys on the server, then the copies of them the gutter holds.
    assert_equal [3, 2, 4, 3, 0], outage_figures(counters)
  end

  # More changes than recovery_log_size: the process can't say which copies are current, so by
  # default the server stays down, reported once, until an operator flushes it.
  def test_an_overflowed_log_keeps_the_server_down_until_flush_server
    client = new_client(recovery_log_size: 2)
    keys = keys_on(client, @primary.server).first(4)
    keys.each { |key| assert client.set(key, "v1") }

    stall(client)
    keys.first(3).each { |key| assert client.set(key, "v2") }
    assert_equal({@primary.server => :overflowed}, client.stats[:recovery])
    recover(client, keys.first)
    error = assert_raises(Strata::TierError) { client.get(keys.first) }
    assert_equal @primary.server, error.server
    assert_match(/can't be trusted/, error.message)
    assert_equal [@gutter.server, :gutter], client.ring.route(keys.first), "it stays down"
    @clock.now += RETRY_AFTER * 100
    assert_equal "v2", client.get(keys.first), "served from the gutter, with no further report"
    assert_nil client.get(keys.last)

    client.flush_server(@primary.server)
    assert_equal [@primary.server, :primary], client.ring.route(keys.first)
    assert_empty client.get_multi(keys), "flushed before it serves: no v1"
    assert_empty client.stats[:recovery]
  end

  def test_an_overflowed_log_with_recovery_overflow_flush_flushes_the_server
    client = new_client(recovery_log_size: 2, recovery_overflow: :flush)
    counters = Strata::Counters.new
    client.counts = Strata::Counters::Row.new(counters, "memcached")
    keys = keys_on(client, @primary.server).first(4)
    keys.each { |key| assert client.set(key, "v1") }

    stall(client)
    keys.first(3).each { |key| assert client.set(key, "v2") }
    recover(client, keys.first)
    assert_empty client.get_multi(keys)
    assert_equal 1, outage_figures(counters).last, "one flush at recovery"
    assert client.set(keys.first, "v3")
    assert_equal "v3", client.get(keys.first)
  end

  def test_a_flush_while_a_server_is_down_flushes_it_at_recovery
    client = new_client
    key = key_on(client, @primary.server)
    assert client.set(key, "v1")

    stall(client)
    assert client.flush
    recover(client, key)
    assert_nil client.get(key)
  end

  # The recovery comes before anything else this process asks the server: a call that arrives
  # while it is under way waits for it (a scripted server holds the recovery's delete).
  def test_calls_wait_for_the_recovery_and_none_reads_the_server_first
    scripted = Strata::TestSupport::ScriptedMemcached.new do |line, _data|
      if line.start_with?("mg trip ") then :close
      elsif line.start_with?("md changed ") then :hold
      end
    end.start
    client = new_client([scripted.server], timeout: 5, pool_timeout: 5)
    assert_nil client.get("warm")
    assert_raises(Strata::TierError) { client.get("trip") }
    refute client.ring.up?(scripted.server), "a closed connection marks it down at once"
    assert_raises(Strata::TierError) { client.set("changed", "v2") }
    @clock.now += RETRY_AFTER

    recovering = Thread.new { client.get("other") }
    assert wait_until(DEADLINE) { scripted.commands.any? { |line| line.start_with?("md changed ") } }
    reader = Thread.new { client.get("changed") }
    assert wait_until(DEADLINE) { reader.status == "sleep" }, "the reader waits"
    refute(scripted.commands.any? { |line| line.start_with?("mg changed ") }, "nothing is read before the recovery ends")
    scripted.release

    assert_nil recovering.value
    assert_nil reader.value
    commands = scripted.commands
    assert_operator commands.index { |line| line.start_with?("md changed ") }, :<,
      commands.index { |line| line.start_with?("mg changed ") }
  ensure
    scripted&.stop
  end

  def test_bad_recovery_options
    assert_raises(ArgumentError) { new_client(recovery_log_size: 0) }
    assert_raises(ArgumentError) { new_client(recovery_overflow: :drop) }
    assert_raises(ArgumentError) { new_client(down_after: 0) }
    assert_raises(ArgumentError) { new_client.flush_server("10.0.0.1:1") }
  end

  private

  # Stops the primary and makes the two timed-out reads that mark it down.
  def stall(client)
    @primary.pause
    probe = keys_on(client, @primary.server).last
    2.times { assert_raises(Strata::RetryableError) { client.get(probe) } }
    refute client.ring.up?(@primary.server)
  end

  # Lets the primary run and retry_after pass, so that key routes to it again.
  def recover(client, key)
    @primary.resume
    @clock.now += RETRY_AFTER
    assert_equal [@primary.server, :primary], client.ring.route(key)
  end

  def spawn_memcached
    process = Strata::TestSupport::MemcachedProcess.new
    @processes << process
    process.start
  end

  # gutter_reads, gutter_writes, gutter_deletes, recovery_deletes, recovery_flushes.
  def outage_figures(counters)
    counters.totals[:tiers][:memcached].values_at(*Strata::Counters::MEMCACHED_FIGURES.map(&:to_sym))
  end

  def new_client(servers = [@primary.server, @gutter.server], **options)
    client = Strata::Meta::Client.new(servers: servers, timeout: TIMEOUT, connect_timeout: TIMEOUT,
      pool_timeout: TIMEOUT, retry_after: RETRY_AFTER, clock: @clock, **options)
    @clients << client
    client
  end

  def deletes_on(server)
    server_stat(server, "delete_hits") + server_stat(server, "delete_misses")
  end
end
