# frozen_string_literal: true

require "test_helper"
require "socket"
require "strata/meta/wire"
require "support/waiting"
require "support/select_scheduler"
require "support/child_processes"

# Strata::Meta::Wire on its own, over a connected pair of Unix sockets: this test plays the
# server on the other end. The waits for a reply (a blocking recv in slices while the deadline
# is far, rb_io_wait near it) are checked for what they must do: return the reply, keep the
# deadline, let interrupts in, and keep a second caller's hands off the buffer.
class MetaWireTest < Minitest::Test
  include Strata::Waiting
  include Strata::TestSupport::TrackedChildren

  Wire = Strata::Meta::Wire

  # Seconds a test may wait on a thread before it fails instead of hanging.
  DEADLINE = 10

  class Interrupted < StandardError; end

  def setup
    @pids = []
    @readers = []
    @ours, @theirs = UNIXSocket.pair
    @wire = Wire.new
    @wire.attach(@ours)
  end

  # The peer goes first, so a reader still waiting sees EOF and ends before the wire is let go.
  def teardown
    kill_tracked_children
    @theirs.close
    @readers.each { |reader| reader.join(DEADLINE) rescue nil } # rubocop:disable Style/RescueModifier -- its error is the test's
    @wire.detach
    @ours.close unless @ours.closed?
  end

  # A thread that waits for a line on @wire, once it is inside the wait.
  def waiting_reader
    reader = Thread.new { @wire.read_line }
    reader.report_on_exception = false
    @readers << reader
    assert wait_until(DEADLINE) { receiving? }, "the reader never started waiting"
    reader
  end

  # True once another thread is inside a recv on @wire: every call then raises Wire::Idle.
  def receiving?
    @wire.unread?
    false
  rescue Wire::Idle
    true
  end

  def test_reply_that_comes_later_is_read
    @wire.start(5)
    reader = waiting_reader
    @theirs.write("VA 3\r\nabc\r\n")
    assert_equal "VA 3", reader.join(DEADLINE).value
    assert_equal "abc", @wire.read_bytes(3)
  end

  # A data block is read with the "\r\n" after it checked and left out; one that is not
  # followed by "\r\n" means the stream is out of step.
  def test_a_data_block_is_read_without_its_terminator_and_checked
    @wire.start(5)
    @theirs.write("a\r\nb\r\n")
    assert_equal "a\r\nb", @wire.read_bytes(4)
    ["abcd\n\n", "abcde\r\n"].each do |reply|
      @theirs.write(reply)
      assert_raises(Wire::Malformed, reply.inspect) { @wire.read_bytes(4) }
      @wire.detach
      @ours.close
      @ours, @theirs = UNIXSocket.pair
      @wire.attach(@ours)
      @wire.start(5)
    end
  end

  def test_short_and_long_strings_leave_in_the_order_written
    pieces = Array.new(41) { |i| i.even? ? "s#{i}\r\n" : "L#{i}" * 3_000 } # more pieces than one send gathers
    expected = pieces.join
    reader = Thread.new { @theirs.read(expected.bytesize) } # ~200 KB: more than the socket buffers
    @wire.start(5)
    @wire.write(*pieces)
    @wire.flush
    assert_equal expected, reader.value
  end

  def test_a_long_string_changed_after_write_leaves_as_written
    value = "v" * 5_000
    @wire.start(5)
    @wire.write("ms k 5000\r\n", value, "\r\n")
    value.replace("w" * 5_000)
    @wire.flush
    assert_equal "ms k 5000\r\n#{"v" * 5_000}\r\n", @theirs.read(5_000 + 13)
  end

  def test_second_caller_is_refused_while_a_recv_writes_the_buffer
    @wire.start(5)
    reader = waiting_reader
    [[:read_line], [:flush], [:unread?], [:stop], [:detach], [:start, 1], [:write, "mn\r\n"]].each do |call, *args|
      assert receiving?, "the reader is still inside its recv"
      assert_raises(Wire::Idle, call) { @wire.public_send(call, *args) }
    end
    @theirs.write("MN\r\n")
    assert_equal "MN", reader.join(DEADLINE).value
    refute @wire.unread?
  end

  def test_thread_raise_interrupts_a_waiting_recv
    @wire.start(5)
    reader = waiting_reader
    reader.raise(Interrupted)
    assert_raises(Interrupted) { reader.join(DEADLINE) }
    refute receiving?, "the flag is down after an interrupt"
  end

  def test_silence_times_out_with_a_deadline_far_and_near
    [0.3, 0.03].each do |timeout| # the first waits in blocking slices, the second only in rb_io_wait
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      @wire.start(timeout)
      assert_raises(Wire::TimedOut) { @wire.read_line }
      assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :>=, timeout,
        "gave up before its deadline"
      @wire.stop
    end
  end

  # A blocking recv would hold the thread until the deadline (far beyond DEADLINE) was nearly
  # up, and the fiber that answers could not run before then.
  def test_under_a_fiber_scheduler_a_wait_lets_the_other_fibers_run
    reply = nil
    runner = Thread.new do
      Fiber.set_scheduler(Strata::TestSupport::SelectScheduler.new)
      Fiber.schedule do
        @wire.start(DEADLINE * 6)
        reply = @wire.read_line
      end
      Fiber.schedule { @theirs.write("MN\r\n") }
      Fiber.set_scheduler(nil) # runs both fibers to their end
    end
    assert runner.join(DEADLINE), "the fibers did not finish"
    assert_equal "MN", reply
  end

  # Ruby ends the wait with IOError when the close interrupts the reader's recv, and the recv
  # fails with EBADF when the close comes first (the reader between its flag and the call):
  # Connection takes both as a network error.
  def test_an_io_closed_by_another_thread_ends_the_wait
    @wire.start(5)
    reader = waiting_reader
    @ours.close
    assert_raises(IOError, Errno::EBADF) { reader.join(DEADLINE) }
  end

  # The receiving thread does not exist in the child, which must still be able to let the
  # wire go and use it on a socket of its own.
  def test_a_child_forked_during_a_recv_can_use_the_wire
    @wire.start(5)
    waiting_reader
    pid = fork_tracked do
      @wire.detach
      mine, peer = UNIXSocket.pair
      @wire.attach(mine)
      @wire.start(5)
      peer.write("MN\r\n")
      @wire.read_line == "MN"
    end
    status = reap_child(pid)
    assert status&.success?, "the child used the wire (#{status.inspect})"
  end

  def test_closed_peer_is_reported
    @wire.start(5)
    @theirs.close
    assert_raises(Wire::Closed) { @wire.read_line }
  end
end
