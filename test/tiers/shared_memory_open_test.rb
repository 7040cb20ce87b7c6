# frozen_string_literal: true

require "test_helper"
require "support/child_processes"

# Opening the table beside a process stopped (SIGSTOP) in the middle of its own open (table.h,
# strata_open). The stopped process holds the file's flock, as an opener may at any point: a valid
# table opens without waiting for it; a table that still has to be built waits for its builder a
# bounded time, far below a request's budget, then fails with a TierError.
class SharedMemoryOpenTest < Minitest::Test
  include Strata::TestSupport::TrackedChildren

  SIZE = 1024 * 1024
  DEADLINE = 10.0 # seconds for any handshake or reap; a hang fails the test instead of stalling it
  BUILD_WAIT_BOUND = 5.0 # table.h: an opener waits up to 1 s for a builder

  def setup
    @pids = []
    @dir = Strata::TestSupport.private_tmpdir
    @path = File.join(@dir, "open.strata")
  end

  def teardown
    kill_tracked_children
    FileUtils.remove_entry(@dir)
  end

  def test_valid_table_opens_beside_an_opener_stopped_holding_the_lock
    table = open_table
    assert table.set("k", "v")
    table.close
    stop_holding_flock

    opened = nil
    error = error_of { opened = open_table }
    assert_nil error, "the open waited for the stopped process and failed"
    assert_equal "v", opened.get("k")
    assert opened.set("k2", "v2")
    opened.close
    assert_child_succeeds { open_table.get("k2") == "v2" } # and in another process
  end

  def test_unbuilt_table_waits_a_bounded_time_for_a_stopped_builder
    File.open(@path, File::RDWR | File::CREAT | File::EXCL, 0o600) {} # as a builder starts it
    pid = stop_holding_flock

    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    error = assert_raises(Strata::TierError) { open_table }
    waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    assert_includes error.message, @path
    assert_match(/building/, error.message)
    assert_operator waited, :<, BUILD_WAIT_BOUND, "an open waited #{waited.round(1)} s for a stopped builder"
    assert_equal 0, File.size(@path)

    # Once the builder is gone, the next opener builds the file.
    kill_and_reap(pid, DEADLINE)
    @pids.delete(pid)
    table = open_table
    assert table.set("k", "v")
    assert_equal "v", table.get("k")
    table.close
  end

  private

  def open_table
    Strata::Tiers::SharedMemory.new(path: @path, size: SIZE)
  end

  # Forks a child that takes the table file's flock and stops itself; returns its pid once it is
  # stopped (seen by waitpid, not guessed by a sleep).
  def stop_holding_flock
    pid = fork_tracked do
      File.open(@path, "r+") do |file|
        file.flock(File::LOCK_EX)
        Process.kill(:STOP, Process.pid)
      end
      true
    end
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + DEADLINE
    loop do
      reaped, status = Process.waitpid2(pid, Process::WUNTRACED | Process::WNOHANG)
      break if reaped && status.stopped?
      flunk "the lock holder exited: #{status.inspect}" if reaped
      flunk "the lock holder did not stop" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.001
    end
    pid
  end

  # Runs the block; the Strata::Error it raised, or nil.
  def error_of
    yield
    nil
  rescue Strata::Error => e
    e
  end

  def assert_child_succeeds(&)
    pid = fork_tracked(&)
    status = reap_child(pid)
    refute_nil status, "child #{pid} did not finish"
    assert status.success?, "child #{pid} failed (exit #{status.exitstatus})"
  end
end
