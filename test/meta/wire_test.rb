# frozen_string_literal: true

require "test_helper"
require "socket"
require "strata/meta/wire"
require "support/waiting"
require "support/select_scheduler"

# Strata::Meta::Wire on its own, over a connected pair of Unix sockets: this test plays the
# server on the other end. The waits for a reply (a blocking recv in slices while the deadline
# is far, rb_io_wait near it) are checked for what they must do: return the reply, keep the
# deadline, let interrupts in, and keep a second caller's hands off the buffer.
class MetaWireTest < Minitest::Test
  include Strata::Waiting

  Wire = Strata::Meta::Wire

  # Seconds a test may wait on a thread before it fails instead of hanging.
  DEADLINE = 10

  class Interrupted < StandardError; end

  def setup
    @ours, @theirs = UNIXSocket.pair
    @wire = Wire.new
    @wire.attach(@ours)
  end

  def teardown
    @wire.detach
    @ours.close
    @theirs.close
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
    reader = Thread.new { @wire.read_line }
    assert wait_until(DEADLINE) { receiving? }, "the reader never started waiting"
    @theirs.write("VA 3\r\nabc\r\n")
    assert_equal "VA 3", reader.join(DEADLINE).value
    assert_equal "abc", @wire.read_bytes(3)
  end

  def test_second_caller_is_refused_while_a_recv_writes_the_buffer
    @wire.start(5)
    reader = Thread.new { @wire.read_line }
    assert wait_until(DEADLINE) { receiving? }, "the reader never started waiting"
    %i[read_line flush unread? stop detach].each do |call|
      assert_raises(Wire::Idle, call) { @wire.public_send(call) }
    end
    assert_raises(Wire::Idle) { @wire.start(1) }
    assert_raises(Wire::Idle) { @wire.write("mn\r\n") }
    @theirs.write("MN\r\n")
    assert_equal "MN", reader.join(DEADLINE).value
    refute @wire.unread?
  end

  def test_thread_raise_interrupts_a_waiting_recv
    @wire.start(5)
    reader = Thread.new { @wire.read_line }
    reader.report_on_exception = false
    assert wait_until(DEADLINE) { receiving? }, "the reader never started waiting"
    reader.raise(Interrupted)
    assert_raises(Interrupted) { reader.join(DEADLINE) }
    refute receiving?, "the flag is down after an interrupt"
  end

  def test_silence_times_out_with_a_deadline_far_and_near
    [0.3, 0.03].each do |timeout| # the first waits in blocking slices, the second only in rb_io_wait
      @wire.start(timeout)
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
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

  def test_closed_peer_is_reported
    @wire.start(5)
    @theirs.close
    assert_raises(Wire::Closed) { @wire.read_line }
  end
end
