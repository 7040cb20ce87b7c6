# frozen_string_literal: true

require "test_helper"
require "timeout"
require "strata/resource_pool"
require "support/child_processes"
require "support/waiting"

class ResourcePoolTest < Minitest::Test
  include Strata::TestSupport::ChildProcesses
  include Strata::Waiting

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
      assert_raises(Strata::ResourcePool::TimeoutError) { @pool.with { @pool.with { flunk "a third resource" } } }
    end
    assert_equal 2, @made
  end

  def test_the_resource_given_back_last_is_taken_first
    @pool.with { @pool.with { nil } } # 2 is given back, then 1
    assert_equal [1, 1, 1], Array.new(3) { @pool.with(&:id) }, "a lone caller keeps one resource warm"
  end

  def test_an_interrupt_in_the_block_gives_the_resource_back
    never = Queue.new # popped by nobody: a block that waits until it is interrupted
    assert_raises(Timeout::Error) { Timeout.timeout(0.01) { @pool.with { never.pop } } }
    thread = Thread.new { @pool.with { never.pop } }
    thread.report_on_exception = false
    wait_until_sleeping(thread)
    thread.raise(RuntimeError, "stop")
    assert_raises(RuntimeError) { thread.join }

    # Both resources at once: a leaked one would leave the second checkout waiting in vain.
    ids = @pool.with { |first| @pool.with { |second| [first.id, second.id] } }
    assert_equal 2, ids.uniq.size, "both resources are free again"
    assert_equal 2, @made
  end

  def test_a_waiting_caller_gets_the_resource_given_back
    pool = Strata::ResourcePool.new(size: 1, timeout: 30) { Resource.new(@made += 1, false) }
    handed = Queue.new
    release = Queue.new
    holder = Thread.new do
      pool.with do |resource|
        handed << resource.id
        release.pop
      end
    end
    assert_equal 1, handed.pop
    waiter = Thread.new { pool.with(&:id) }
    wait_until_sleeping(waiter)
    release << :go
    assert_equal 1, waiter.value, "the waiter got the one resource once it was given back"
    holder.join
    assert_equal 1, @made
  end

  def test_threads_never_share_a_resource
    pool = Strata::ResourcePool.new(size: 2, timeout: 30) { Resource.new(@made += 1, false) }
    users = Hash.new(0)
    lock = Mutex.new
    shared = false
    threads = Array.new(6) do
      Thread.new do
        2_000.times do
          pool.with do |resource|
            lock.synchronize { shared ||= (users[resource.id] += 1) > 1 }
            Thread.pass
            lock.synchronize { users[resource.id] -= 1 }
          end
        end
      end
    end
    threads.each(&:join)
    refute shared, "two threads held one resource at once"
    assert_equal 2, @made
  end

  def test_a_failed_make_frees_its_place
    failures = 1
    pool = Strata::ResourcePool.new(size: 1, timeout: 0.05) do
      raise IOError, "cannot open" if (failures -= 1) >= 0

      Resource.new(@made += 1, false)
    end
    assert_raises(IOError) { pool.with { flunk "no resource was made" } }
    assert_equal 1, pool.with(&:id), "the place the failed make took is free again"
  end

  def test_shutdown_closes_a_busy_resource_when_it_is_given_back
    busy = nil
    @pool.with do |resource|
      busy = resource
      @pool.shutdown { |closing| closing.closed = true }
      refute busy.closed, "a busy resource is not closed under its user"
    end
    assert busy.closed, "closed once given back"
    refute_same busy, @pool.with { |resource| resource }
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

  def test_shutdown_closes_a_lent_resource_when_it_is_given_back
    idle = @pool.with { |resource| resource } # now idle: the next checkout is a loan
    lent = @pool.with do |resource|
      @pool.shutdown { |closing| closing.closed = true }
      refute resource.closed, "a lent resource is not closed under its user"
      resource
    end
    assert_same idle, lent
    assert lent.closed, "closed once given back"
  end

  # Thread#raise, 2,000 times, into a thread that checks the pool's one resource out and back
  # (a loan once it is idle). Under the GVL an interrupt lands where the worker gives the GVL
  # up: inside the block (its Thread.pass, the quickest way to hand over) or at any check point
  # where it was preempted. A resource dropped on the way would leave the last checkout waiting
  # in vain.
  def test_interrupts_at_any_moment_never_lose_a_resource
    pool = Strata::ResourcePool.new(size: 1, timeout: 5) { Resource.new(@made += 1, false) }
    stop = false
    ready = Queue.new
    worker = Thread.new do
      # Interrupts reach the worker only inside the checkout; those still queued at the end are
      # let through one by one and dropped.
      Thread.handle_interrupt(Interrupted => :never) do
        ready << true
        until stop && !Thread.pending_interrupt?
          begin
            Thread.handle_interrupt(Interrupted => :immediate) { pool.with { Thread.pass } }
          rescue Interrupted
            nil
          end
        end
      end
    end
    ready.pop
    random = Random.new(7)
    2_000.times do
      worker.raise(Interrupted)
      random.rand(3).times { Thread.pass }
    end
    stop = true
    worker.join
    assert_equal 1, pool.with(&:id), "the one resource is still there"
    assert_equal 1, @made
  end

  def test_a_loan_waits_for_a_held_lock_to_give_back
    stock = Strata::ResourcePool::Stock.new(1, -> { Resource.new(@made += 1, false) })
    stock.give(stock.take(1)) # one idle resource
    lock = stock.instance_variable_get(:@lock) # a taker inside its critical section holds it
    lock.synchronize do
      assert_same Strata::ResourcePool::Stock::UNLENT, stock.lend { flunk "nothing is lent under a held lock" }
    end
    lender = Thread.current
    holder = nil
    value = stock.lend do |resource|
      # Holds the lock until the loan's return path is asleep waiting for it.
      holder = Thread.new { lock.synchronize { wait_until(5) { lender.status == "sleep" } } }
      wait_until(5) { lock.locked? }
      resource.id
    end
    assert_equal 1, value
    holder.join
    assert_equal 1, stock.lend(&:id), "given back after the lock was free"
    assert_same Strata::ResourcePool::Stock::UNLENT, Strata::ResourcePool::Stock.new(1, -> {}).lend { flunk }
  end

  private

  class Interrupted < StandardError; end

  def wait_until_sleeping(thread)
    assert wait_until(5) { thread.status == "sleep" }, "the thread waits inside the pool"
  end
end
