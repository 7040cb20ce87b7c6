# frozen_string_literal: true

require "test_helper"
require "strata/meta/recovery_log"

# The log is pure: no server needs to run.
class MetaRecoveryLogTest < Minitest::Test
  RecoveryLog = Strata::Meta::RecoveryLog
  A = "10.0.0.1:11211"
  B = "10.0.0.2:11211"

  def test_done_forgets_only_what_was_taken
    log = RecoveryLog.new([A, B], limit: 10, overflow: :stay_down)
    refute log.any?
    log.note(A, "k1", B)
    log.note(A, "k2", nil)
    assert log.pending?(A)
    refute log.pending?(B)
    taken = log.take(A)
    assert_equal({"k1" => [B], "k2" => [nil]}, taken)

    log.note(A, "k2", nil) # noted again while the recovery runs
    log.note(A, "k3", nil)
    log.done(A, taken)
    assert_equal %w[k2 k3], log.take(A).keys, "keys noted since the take stay"
    assert_equal({A => 2}, log.sizes)
  end

  def test_a_note_without_gutter_keeps_the_known_gutter
    log = RecoveryLog.new([A, B], limit: 10, overflow: :stay_down)
    log.note(A, "k", B)
    log.note(A, "k", nil)
    assert_equal({"k" => [B]}, log.take(A))
  end

  def test_overflow_forgets_the_keys_and_says_what_to_do
    log = RecoveryLog.new([A, B], limit: 2, overflow: :stay_down)
    log.note(A, "k1", B)
    log.note(A, "k2", B)
    log.note(A, "k1", B) # known already: no overflow
    assert_nil log.overflow(A)
    log.note(A, "k3", B)
    assert_equal :stay_down, log.overflow(A)
    assert_empty log.take(A)
    assert log.pending?(A)
    assert_equal({A => :overflowed}, log.sizes)

    log.hold(A)
    refute log.pending?(A), "held down: nothing to do until an operator acts"
    refute log.any?
    log.note(A, "k4", B)
    assert_empty log.take(A), "nothing more is noted"

    log.flush(A)
    assert log.pending?(A)
    assert_equal :flush, log.overflow(A)
    log.done(A, log.take(A), flushed: true)
    refute log.pending?(A)
    assert_empty log.sizes
  end

  def test_overflow_flush
    log = RecoveryLog.new([A, B], limit: 1, overflow: :flush)
    log.note(B, "k1", A)
    log.note(B, "k2", A)
    assert_equal :flush, log.overflow(B)
  end
end
