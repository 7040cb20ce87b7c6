# frozen_string_literal: true

require "test_helper"
require "timeout"
require "strata/resource_pool"
require "support/child_processes"

class ResourcePoolTest < Minitest::Test
  include Strata::TestSupport::ChildProcesses

  Resource = Struct.new(:id, :closed)

  def setup
    @made = 0
    @pool = Strata::ResourcePool.new(size: 2, timeout: 0.05) { Resource.new(@made += 1, false) }
  end

  def test_makes_at_most_size_and_reuses_what_is_given_back
    ids = Array.new(5) { @pool.with(&:id) }
    assert_equal [1], ids.uniq, "one caller at a time needs one resource"

    @pool.with do |outer|
      @pool.with { |inner| refute_same outer, inner }
      assert_raises(ConnectionPool::TimeoutError) { @pool.with { @pool.with { flunk "a third resource" } } }
    end
    assert_equal 2, @made
  end

  def test_an_interrupt_in_the_block_gives_the_resource_back
    never = Queue.new # popped by nobody: a block that waits until it is interrupted
    assert_raises(Timeout::Error) { Timeout.timeout(0.01) { @pool.with { never.pop } } }
    thread = Thread.new { @pool.with { never.pop } }
    thread.report_on_exception = false
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 5
    Thread.pass until thread.status == "sleep" || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    assert_equal "sleep", thread.status, "the thread waits inside the pool"
    thread.raise(RuntimeError, "stop")
    assert_raises(RuntimeError) { thread.join }

    # Both resources at once: a leaked one would leave the second checkout waiting in vain.
    ids = @pool.with { |first| @pool.with { |second| [first.id, second.id] } }
    assert_equal 2, ids.uniq.size, "both resources are free again"
    assert_equal 2, @made
  end

  def test_shutdown_closes_idle_resources_and_the_next_call_starts_afresh
    first = @pool.with { |resource| resource }
    @pool.shutdown { |resource| resource.closed = true }
    assert first.closed
    second = @pool.with { |resource| resource }
    refute_same first, second
    refute second.closed
  end

  def test_a_forked_child_makes_its_own_resources
    parent = @pool.with { |resource| resource }
    pid = fork_child { @pool.with { |resource| !resource.equal?(parent) && resource.id == parent.id + 1 } }
    status = reap(pid, 10)
    assert status&.success?, "the child got a resource of its own"
    assert_same parent, @pool.with { |resource| resource }, "the parent's resource stays the parent's"
  end
end
