# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "support/child_processes"

# Stampede: 200 concurrent fetches of one cold key (50 threads in each of 4 processes) run the
# block exactly once, and every one of them gets its value. The block takes a while, as real work
# does, so the others really are waiting; nothing here is asserted on time.
class StrataStoreStampedeTest < Strata::StoreCase
  include Strata::TestSupport::TrackedChildren

  PROCESSES = 4
  THREADS = 50
  DEADLINE = 60.0 # seconds for a child to finish
  WORK = 0.3 # seconds the block takes

  def setup
    @pids = []
    @namespace = "stampede-#{SecureRandom.hex(6)}"
  end

  def teardown
    kill_tracked_children
  end

  # Four hosts (a table each) sharing memcached: the cluster lease picks one filler.
  def test_four_hosts_sharing_memcached_fill_once
    assert_stampede_fills_once { |process| {l1: {path: File.join(@tmpdir, "host-#{process}.l1"), size: TABLE_SIZE}, memcached: memcached} }
  end

  # memcached alone: the lease alone.
  def test_memcached_alone_fills_once
    assert_stampede_fills_once { {memcached: memcached} }
  end

  # One host, four processes on its table, no memcached: the host lock alone.
  def test_one_host_without_memcached_fills_once
    assert_stampede_fills_once { {l1: {path: table_path, size: TABLE_SIZE}} }
  end

  # One host, four processes, with memcached: both.
  def test_one_host_with_memcached_fills_once
    assert_stampede_fills_once { {l1: {path: table_path, size: TABLE_SIZE}, memcached: memcached} }
  end

  # fetch_multi on two cold keys, four hosts sharing memcached: each key's block runs once.
  def test_fetch_multi_fills_each_cold_key_once
    assert_stampede_fills_once(names: %w[cold other]) do |process|
      {l1: {path: File.join(@tmpdir, "host-#{process}.l1"), size: TABLE_SIZE}, memcached: memcached}
    end
  end

  private

  def memcached
    # A pool as large as the threads that share it, as a Puma config would have.
    {servers: Strata::TestSupport.memcached_servers, pool_size: THREADS, timeout: 2}
  end

  # Yields each process's index for its store options. With names, the threads call fetch_multi
  # on all of them; each name's block must run once.
  def assert_stampede_fills_once(names: nil)
    runs = File.join(@tmpdir, "runs")
    values = File.join(@tmpdir, "values")
    ready_r, ready_w = IO.pipe
    go_r, go_w = IO.pipe
    pids = Array.new(PROCESSES) do |process|
      options = yield(process)
      fork_tracked do
        ready_r.close
        go_w.close
        cache = ActiveSupport::Cache::StrataStore.new(namespace: @namespace, fill_wait: DEADLINE, **options)
        compute = lambda do |name|
          sleep WORK
          File.write(runs, "#{name}\n", mode: "a")
          "#{name} computed by #{Process.pid}"
        end
        gate = Queue.new
        threads = Array.new(THREADS) do
          Thread.new do
            gate.pop
            names ? cache.fetch_multi(*names, &compute).values.join("|") : cache.fetch("cold") { compute.call("cold") }
          end
        end
        ready_w.write("r")
        go_r.read(1)
        THREADS.times { gate << true }
        got = threads.map(&:value)
        File.write(values, got.map { |value| "#{value}\n" }.join, mode: "a")
        true
      end
    end
    ready_w.close
    go_r.close
    PROCESSES.times { assert_equal "r", ready_r.read(1), "every process is ready" }
    go_w.write("g" * PROCESSES)
    go_w.close
    pids.each { |pid| assert_predicate reap_child(pid), :success? }

    filled = File.readlines(runs, chomp: true)
    assert_equal((names || ["cold"]).sort, filled.sort, "each block ran once")
    got = File.readlines(values, chomp: true)
    assert_equal PROCESSES * THREADS, got.size
    assert_equal 1, got.uniq.size, "all #{got.size} fetches got the one value: #{got.uniq.first(3)}"
  ensure
    [ready_r, ready_w, go_r, go_w].each { |io| io&.close unless io&.closed? }
  end
end
