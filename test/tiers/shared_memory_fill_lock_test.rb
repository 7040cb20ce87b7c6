# frozen_string_literal: true

require "test_helper"
require "support/child_processes"
require "support/waiting"

module Strata
  module Tiers
    # SharedMemory#lock_fill and #unlock_fill: the host's fill locks (ext/strata/fill_locks.h), a
    # region of the table file of their own. One holder per key across handles and processes, given
    # back only by its holder, outliving a holder killed with SIGKILL until it lapses, and nothing
    # written to the table itself.
    class SharedMemoryFillLockTest < Minitest::Test
      include TestSupport::TrackedChildren
      include Waiting

      DEADLINE = 10

      def setup
        @dir = TestSupport.private_tmpdir
        @path = File.join(@dir, "t.l1")
        @table = SharedMemory.new(path: @path, size: 2 << 20)
        @pids = []
      end

      def teardown
        kill_tracked_children
        @table.close
        FileUtils.remove_entry(@dir)
      end

      def test_one_holder_until_it_gives_the_lock_back
        token = @table.lock_fill("k", 5)
        assert_kind_of Integer, token
        assert_equal false, @table.lock_fill("k", 5), "held"
        assert_kind_of Integer, @table.lock_fill("other", 5), "another key has its own lock"

        assert @table.unlock_fill("k", token)
        refute @table.unlock_fill("k", token), "given back once"
        again = @table.lock_fill("k", 5)
        assert_kind_of Integer, again
        refute @table.unlock_fill("other-key", again), "a token gives back its own key's lock only"
        assert @table.unlock_fill("k", again)
      end

      def test_locks_write_nothing_to_the_table
        token = @table.lock_fill("k", 5)
        assert_empty @table.keys
        assert_nil @table.get("k")
        @table.unlock_fill("k", token)
        stats = @table.stats
        assert_equal [0, 0], stats.values_at(:sets, :deletes)
      end

      def test_another_handle_on_the_file_sees_the_lock
        other = SharedMemory.new(path: @path, size: 2 << 20)
        token = @table.lock_fill("k", 5)
        assert_equal false, other.lock_fill("k", 5)
        assert other.unlock_fill("k", token), "the token is the lock's, whichever handle gives it back"
        assert_kind_of Integer, other.lock_fill("k", 5)
      ensure
        other&.close
      end

      # The holder dies without giving the lock back: the others find it held until it lapses,
      # then take it. (Its TTL is what passes here: time is what this test is about.)
      def test_a_lock_outlives_a_holder_killed_with_sigkill_until_it_lapses
        reader, writer = IO.pipe
        pid = fork_tracked do
          reader.close
          mine = SharedMemory.new(path: @path, size: 2 << 20)
          writer.write(mine.lock_fill("k", 0.3) ? "1" : "0")
          writer.close
          sleep
        end
        writer.close
        assert_equal "1", reader.read(1)
        kill_and_reap(pid, DEADLINE)
        @pids.delete(pid)

        assert_equal false, @table.lock_fill("k", 5), "held by the dead holder"
        assert_kind_of Integer, wait_until(DEADLINE) { @table.lock_fill("k", 5) }, "lapsed and taken over"
      ensure
        reader&.close
      end

      # 8,192 lock words: holding locks of many keys makes some key's word another key's. That key
      # gets nil (no lock to be had), counted as a collision.
      def test_a_key_whose_word_another_key_holds_gets_no_lock_and_is_counted
        answers = Array.new(20_000) { |i| @table.lock_fill("held-#{i}", 60) }
        assert_includes answers, nil
        assert_equal answers.count(nil), @table.stats[:fill_lock_collisions]
      end

      def test_bad_arguments_are_refused
        assert_raises(ArgumentError) { @table.lock_fill("", 5) }
        assert_raises(ArgumentError) { @table.lock_fill("k" * 251, 5) }
        assert_raises(ArgumentError) { @table.lock_fill("k", -1) }
        assert_raises(TypeError) { @table.lock_fill("k", "5") }
        assert_raises(TypeError) { @table.unlock_fill("k", "1") }
        assert_raises(ArgumentError) { @table.unlock_fill("k", 0) }
        assert_raises(ArgumentError) { @table.unlock_fill("k", 1 << 40) }
      end
    end
  end
end
