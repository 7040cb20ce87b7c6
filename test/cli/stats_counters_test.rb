# frozen_string_literal: true

require "test_helper"
require "json"
require "open3"
require "rbconfig"
require "active_support"
require "active_support/cache/strata_store"
require "support/child_processes"

# The host's counters through exe/strata stats, run as a child process: app processes, each
# with its own StrataStore on one L1 file, write and read known numbers of keys; the figures
# printed are their sums, a process killed with SIGKILL included.
class StatsCountersTest < Minitest::Test
  include Strata::TestSupport
  include Strata::TestSupport::TrackedChildren

  ROOT = File.expand_path("../..", __dir__)
  EXE = File.join(ROOT, "exe", "strata")
  TABLE_SIZE = 4 << 20
  DEADLINE = 30.0

  def setup
    @dir = private_tmpdir
    @l1_path = File.join(@dir, "app.l1")
    @pids = []
  end

  def teardown
    kill_tracked_children
    FileUtils.remove_entry(@dir) if @dir && File.exist?(@dir)
  end

  # Process n writes n + 2 keys, reads each back (hits) and reads n + 1 keys nobody wrote
  # (misses). Two processes run together and exit after closing their store; a third is killed
  # while its store is open. strata stats adds all three.
  def test_processes_add_up_and_a_killed_one_keeps_its_counts
    pids = 2.times.map { |n| fork_tracked { work(n) } } # at once, or one after the other
    assert_equal [0, 0], pids.map { |pid| reap_child(pid)&.exitstatus }
    ready, done = IO.pipe
    hold, release = IO.pipe
    killed = fork_tracked do
      ready.close
      release.close
      store = work(2, close: false)
      done.write("1")
      done.close
      hold.read # blocks until killed: the store stays open, its slot owned
      store
    end
    done.close
    hold.close
    assert_equal "1", ready.read(1), "the third process counted"

    alive = stats_json
    assert_equal 1, alive[:store][:processes]
    kill_and_reap(killed, DEADLINE)
    @pids.delete(killed)
    figures = stats_json

    writes = 2 + 3 + 4
    misses = 1 + 2 + 3
    counters = figures[:l1][:counters]
    assert_equal [writes, writes, misses], counters.values_at(:writes, :hits, :misses)
    assert_equal 0, counters[:writes_refused]
    assert_in_delta writes.fdiv(writes + misses), counters[:hit_ratio], 0.0001
    store = figures[:store]
    assert_equal writes, store[:operations][:read_hit][:count]
    assert_equal writes, store[:operations][:write][:count]
    # A process that came after another closed its store took the slot given back, and added
    # to its counts: two slots if the first two ran at once, else one.
    assert_equal [0, 0], store.values_at(:processes, :unslotted)
    assert_includes 1..2, store[:slots_used]
    assert_equal alive[:l1][:counters][:hits], counters[:hits], "the killed process's counts stay in the sum"
  ensure
    [ready, done, hold, release].each { |io| io&.close unless io&.closed? }
  end

  def test_the_text_report_shows_the_counters_and_hit_ratio
    assert_equal 0, reap_child(fork_tracked { work(0) })&.exitstatus

    out, err, status = run_stats(@l1_path)

    assert status.success?, err
    line = out.lines.find { |l| l.start_with?("l1 ") && l.include?("host counters") }
    assert_match(/hits=2 misses=1 ratio=66.67% writes=2 /, line)
    assert_match(/^store +0 processes +ratio=100.0% read_hit=2 /, out, "the process closed its store: its slot is free, its counts stay")
  end

  # A file of the previous layout (3, without the counters region) is reported and left as it
  # is: the app's next open rebuilds it (table.c, file_validate), strata stats never does.
  def test_a_file_of_the_previous_layout_is_refused_and_left_alone
    assert_equal 0, reap_child(fork_tracked { work(0) })&.exitstatus
    File.open(@l1_path, "r+b") { |f| f.pwrite([3].pack("L<"), 8) } # the layout version word
    before = File.binread(@l1_path, 4096)

    out, _err, status = run_stats("--json", @l1_path)

    assert_equal 1, status.exitstatus, "the one tier could not be read"
    assert_match(/layout version 3, this build reads 6/, JSON.parse(out, symbolize_names: true)[:l1][:error])
    assert_equal before, File.binread(@l1_path, 4096)
  end

  private

  # A process's work on its own store: n + 2 writes, their reads, n + 1 reads of absent keys.
  # The store, open unless close.
  def work(n, close: true)
    store = ActiveSupport::Cache::StrataStore.new(l1: {path: @l1_path, size: TABLE_SIZE})
    (n + 2).times { |i| store.write("p#{n}-#{i}", i) }
    (n + 2).times { |i| raise "lost p#{n}-#{i}" unless store.read("p#{n}-#{i}") == i }
    (n + 1).times { |i| raise "found absent-#{n}-#{i}" unless store.read("absent-#{n}-#{i}").nil? }
    return store unless close

    store.close
    true
  end

  def stats_json
    out, err, status = run_stats("--json", @l1_path)
    assert status.success?, err
    JSON.parse(out, symbolize_names: true)
  end

  def run_stats(*args)
    Open3.capture3(RbConfig.ruby, "-rbundler/setup", "-I", File.join(ROOT, "lib"), EXE, "stats", *args)
  end
end
