# frozen_string_literal: true

require "test_helper"
require "support/child_processes"

# The preload pattern of Puma and Unicorn: the parent opens the table and writes, then forks workers
# that keep using the inherited handle (ext/strata/table.h, "fork": nothing per-process goes stale).
class SharedMemoryForkTest < Minitest::Test
  include Strata::TestSupport::TrackedChildren

  SIZE = 8 * 1024 * 1024
  DEADLINE = 20.0 # seconds for a child (and its own children) to exit

  def setup
    @pids = []
    @dir = Strata::TestSupport.private_tmpdir
    @table = Strata::Tiers::SharedMemory.new(path: File.join(@dir, "fork.strata"), size: SIZE, lock_timeout: 2)
  end

  def teardown
    kill_tracked_children
    @table.close
    FileUtils.remove_entry(@dir)
  end

  def test_children_and_grandchildren_share_the_inherited_table
    assert @table.set("parent", "from parent")
    assert @table.set("counter", "0")
    workers = 3
    pids = Array.new(workers) do |i|
      fork_checked do
        check(@table.get("parent") == "from parent", "worker #{i} reads the parent's value")
        check(@table.set("worker:#{i}", "from worker #{i}"), "worker #{i} writes")
        check(@table.incr("counter").is_a?(Integer), "worker #{i} increments")
        grandchild = fork_checked do
          check(@table.get("parent") == "from parent", "grandchild #{i} reads the parent's value")
          check(@table.get("worker:#{i}") == "from worker #{i}", "grandchild #{i} reads its parent's value")
          check(@table.set("grandchild:#{i}", "from grandchild #{i}"), "grandchild #{i} writes")
          check(@table.incr("counter").is_a?(Integer), "grandchild #{i} increments")
        end
        status = reap_child(grandchild)
        check(status&.success?, "grandchild #{i} exited 0, got #{status.inspect}")
        check(@table.get("grandchild:#{i}") == "from grandchild #{i}", "worker #{i} sees its child's write")
      end
    end
    pids.each_with_index do |pid, i|
      status = reap_child(pid)
      assert status&.success?, "worker #{i} exited 0, got #{status.inspect}"
    end
    workers.times do |i|
      assert_equal "from worker #{i}", @table.get("worker:#{i}")
      assert_equal "from grandchild #{i}", @table.get("grandchild:#{i}")
    end
    assert_equal((2 * workers).to_s, @table.get("counter"))
    assert @table.set("parent", "parent again")
    assert_equal "parent again", @table.get("parent")
  end

  # A child that closes its copy of the handle (a worker shutting down) leaves the parent's alone.
  def test_child_close_does_not_affect_the_parent
    assert @table.set("k", "v")
    status = reap_child(fork_checked do
      check(@table.get("k") == "v", "child reads")
      @table.close
    end)
    assert status&.success?, "child exited 0, got #{status.inspect}"
    assert_equal "v", @table.get("k")
    assert @table.set("k", "w")
    assert_equal "w", @table.get("k")
  end

  # A child can open the same file afresh, next to the inherited handle, and both see every write.
  def test_child_opening_the_file_again_sees_the_same_data
    assert @table.set("k", "v")
    status = reap_child(fork_checked do
      again = Strata::Tiers::SharedMemory.new(path: File.join(@dir, "fork.strata"), size: SIZE, lock_timeout: 2)
      check(again.get("k") == "v", "the fresh handle reads the parent's value")
      check(again.set("k2", "v2"), "the fresh handle writes")
      check(@table.get("k2") == "v2", "the inherited handle sees the fresh one's write")
      again.close
    end)
    assert status&.success?, "child exited 0, got #{status.inspect}"
    assert_equal "v2", @table.get("k2")
  end

  private

  # Forks a child running the block; it exits 0 unless a check fails or anything raises (the reason
  # goes to stderr). A grandchild it did not reap in time is killed as it exits.
  def fork_checked
    fork_tracked do
      @pids = []
      yield
      true
    ensure
      kill_tracked_children
    end
  end

  def check(condition, what)
    raise "check failed: #{what}" unless condition
  end
end
