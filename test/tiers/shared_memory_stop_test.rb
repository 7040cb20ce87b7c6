# frozen_string_literal: true

require "test_helper"
require "timeout"
require "support/child_processes"

# A writer that stops (SIGSTOP) while holding a shard lock, then dies (SIGKILL). Exclusion is never
# broken: writers on that shard give up after lock_timeout, readers and other shards go on, and only
# the owner's death frees the lock (robust mutexes: a dead owner's lock is recovered, never timed out).
# A write that gave up leaves its key reading as a miss, never as the value it failed to replace: the
# caller goes on to write the other tiers, so no fault loses a delete (docs/architecture.md,
# "Invariants").
class SharedMemoryStopTest < Minitest::Test
  include Strata::TestSupport::TrackedChildren

  SIZE = 8 * 1024 * 1024
  SHARDS = 4
  DEADLINE = 10.0 # seconds for any handshake or reap; a hang fails the test instead of stalling it

  def setup
    @pids = []
    @dir = Strata::TestSupport.private_tmpdir
    @path = File.join(@dir, "stop.strata")
    @table = open_table
  end

  def teardown
    @pids.dup.each { |pid| kill_child(pid) } # kill_child removes from @pids
    @table&.close
    FileUtils.remove_entry(@dir)
  end

  def test_stopped_lock_holder_blocks_only_its_shard_writers_until_it_dies
    shard = 0
    *same, fresh = keys_on(shard, 4)
    other = keys_on((shard + 1) % SHARDS, 1).first
    same.each { |key| assert @table.set(key, "old #{key}") }
    assert @table.set(other, "old other")

    pid = fork_lock_holder(shard, stop: true)

    # Writers on the held shard give up and say so; nothing is written, and the key they could not
    # write reads as a miss from then on, in every process.
    timeouts = @table.stats[:lock_timeouts]
    result = bounded { @table.set(same[0], "new") }
    assert_equal false, result, "set on a shard whose lock another process holds"
    assert_operator @table.stats[:lock_timeouts], :>, timeouts
    assert_nil @table.get(same[0]), "the old value of a write that failed is not served"
    assert_equal false, bounded { @table.set(fresh, "brand new") }
    assert_equal 2, @table.stats[:lock_timeouts] - timeouts
    assert_nil @table.get(fresh)

    # Readers take no lock: the held shard's other values still read. (A failed write fences 1/32
    # of its bucket, so a key sharing both with same[0] or fresh would miss too: about 1 in 10^5.)
    readable = same.drop(1).select { |key| @table.get(key) == "old #{key}" }
    (same.drop(1) - readable).each { |key| assert_nil @table.get(key) }
    refute_empty readable, "the held shard's other keys still read"
    assert_equal({readable[0] => "old #{readable[0]}", other => "old other"}, @table.get_multi([readable[0], other]))

    # A delete that cannot take the lock still does its job: the key reads as a miss, no error.
    assert_equal true, bounded { @table.delete(readable[0]) }, "a live entry was deleted"
    assert_nil @table.get(readable[0])
    assert_equal false, bounded { @table.delete(readable[0]) }, "already a miss"

    # Other shards are unaffected.
    assert bounded { @table.set(other, "new other") }
    assert_equal "new other", @table.get(other)

    # Another process, with its own handle, is shut out too: exclusion holds across processes.
    assert_child_succeeds do
      table = open_table
      table.set(same[0], "from a third process") == false && table.get(same[0]).nil?
    end
    assert_nil @table.get(same[0]), "the held shard was written while its lock was held"
    assert stopped?(pid), "the lock holder is still stopped, so still holds the lock"

    # The owner dies: the next writer takes the lock over (EOWNERDEAD) and writes work again.
    kill_child(pid)
    recoveries = @table.stats[:owner_died_recoveries]
    assert bounded { @table.set(same[0], "after") }, "set after the lock holder died"
    assert_equal recoveries + 1, @table.stats[:owner_died_recoveries]
    assert_equal "after", @table.get(same[0])
    assert bounded { @table.set(same[1], "after 1") }
    assert_equal recoveries + 1, @table.stats[:owner_died_recoveries], "a lock is recovered once"
    assert_equal "after 1", @table.get(same[1])
    assert_equal "new other", @table.get(other)
  end

  # A holder that exits without releasing leaves the lock to be recovered, like one that is killed.
  def test_lock_holder_that_exits_is_recovered
    shard = 1
    key = keys_on(shard, 1).first
    pid = fork_lock_holder(shard, stop: false)
    status = reap_child(pid)
    assert status&.exited?, "the lock holder exits on its own"
    recoveries = @table.stats[:owner_died_recoveries]
    assert bounded { @table.set(key, "v") }
    assert_equal recoveries + 1, @table.stats[:owner_died_recoveries]
    assert_equal "v", @table.get(key)
  end

  # A writer already waiting on a lock whose holder then dies gets the lock, within its lock_timeout.
  # (Waiting releases the GVL, so this thread can kill the holder while the other waits.)
  def test_waiting_writer_gets_the_lock_when_the_holder_dies
    shard = 2
    key = keys_on(shard, 1).first
    pid = fork_lock_holder(shard, stop: true)
    patient = open_table(lock_timeout: 8)
    started = Queue.new
    writer = Thread.new do
      started << true
      patient.set(key, "waited")
    end
    started.pop
    kill_child(pid)
    assert writer.join(DEADLINE), "the waiting writer returned"
    assert_equal true, writer.value
    assert_equal "waited", @table.get(key)
    patient.close
  end

  private

  def open_table(lock_timeout: 0.05)
    Strata::Tiers::SharedMemory.new(path: @path, size: SIZE, shards: SHARDS, lock_timeout: lock_timeout)
  end

  def keys_on(shard, count)
    (0..).lazy.map { |i| "stop-key-#{i}" }.select { |key| @table._shard_for(key) == shard }.first(count)
  end

  # A child that opens its own handle, takes the shard's writer lock and reports over a pipe. With
  # stop: true it then stops itself, and this returns once the parent has seen it stopped; otherwise
  # it exits still holding the lock.
  def fork_lock_holder(shard, stop:)
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      code = begin
        table = open_table
        table._hold_shard_lock(shard)
        writer.write("held")
        writer.close
        Process.kill(:STOP, Process.pid) if stop
        0
      rescue Exception => e # rubocop:disable Lint/RescueException -- a child must never run the parent's at_exit hooks
        writer.write("#{e.class}: #{e.message}") unless writer.closed?
        1
      end
      exit!(code)
    end
    @pids << pid
    writer.close
    assert IO.select([reader], nil, nil, DEADLINE), "the lock holder reported within #{DEADLINE}s"
    assert_equal "held", reader.read
    wait_until_stopped(pid) if stop
    pid
  ensure
    reader&.close
  end

  def wait_until_stopped(pid)
    deadline = monotonic + DEADLINE
    loop do
      reaped, status = Process.waitpid2(pid, Process::WNOHANG | Process::WUNTRACED)
      return if reaped && status.stopped?
      flunk "the lock holder ended instead of stopping: #{status.inspect}" if reaped
      flunk "the lock holder did not stop within #{DEADLINE}s" if monotonic > deadline
      sleep 0.001
    end
  end

  def stopped?(pid)
    File.read("/proc/#{pid}/stat").split(") ").last.start_with?("T")
  end

  def kill_child(pid)
    status = kill_and_reap(pid, DEADLINE)
    @pids.delete(pid) if status
    refute_nil status, "child #{pid} reaped after SIGKILL"
  end

  def assert_child_succeeds(&)
    status = reap_child(fork_tracked(&))
    assert status&.success?, "child check failed: #{status.inspect}"
  end

  # Last resort against a hang in the table: the call is expected to return well within lock_timeout.
  def bounded(&)
    Timeout.timeout(DEADLINE, &)
  end

  def monotonic
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end
end
