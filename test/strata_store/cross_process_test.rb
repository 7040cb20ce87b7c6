# frozen_string_literal: true

require_relative "store_case"
require "support/child_processes"

# Processes that share the table see each other's writes, and counters stay exact between them.
class StrataStoreCrossProcessTest < Strata::StoreCase
  include Strata::TestSupport::ChildProcesses

  WORKERS = 4
  INCREMENTS = 500
  DEADLINE = 30.0 # seconds for a child to finish

  def test_increments_from_forked_processes_are_exact
    store.write("hits", 0, raw: true)

    run_children(WORKERS) { INCREMENTS.times.all? { store.increment("hits") } }

    assert_equal WORKERS * INCREMENTS, store.read("hits")
  end

  def test_a_counter_created_concurrently_counts_every_increment
    run_children(WORKERS) { INCREMENTS.times.all? { store.increment("fresh") } }

    assert_equal WORKERS * INCREMENTS, store.read("fresh")
  end

  def test_a_value_written_in_a_child_is_read_by_the_parent
    pid = run_children(1) { store.write("from_child", {pid: Process.pid}) }.first

    assert_equal({pid: pid}, store.read("from_child"))
  end

  def test_a_child_that_opens_its_own_store_shares_the_table
    store.write("from_parent", "hello")

    run_children(1) do
      cache = ActiveSupport::Cache::StrataStore.new(l1: {path: table_path, size: TABLE_SIZE})
      cache.read("from_parent") == "hello" && cache.write("reply", "hi")
    end

    assert_equal "hi", store.read("reply")
  end

  private

  # Forks count children running the block, reaps them within DEADLINE and asserts each succeeded
  # (the block returned truthy). Their pids.
  def run_children(count, &block)
    pids = Array.new(count) { fork_child(&block) }
    pids.each do |pid|
      status = reap(pid, DEADLINE) || kill_and_reap(pid, DEADLINE)

      assert status&.success?, "child #{pid} failed: #{status.inspect}"
    end
  end
end
