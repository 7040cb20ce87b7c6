# frozen_string_literal: true

require "test_helper"
require "support/child_processes"
require "support/waiting"

# The per-process memo of large values (ext/strata/value_memo.h): repeat hits on an unchanged
# large value share one buffer, and the table stays the truth for every change, from any process.
class SharedMemoryMemoTest < Minitest::Test
  include Strata::TestSupport::TrackedChildren
  include Strata::Waiting

  SIZE = 8 * 1024 * 1024
  DEADLINE = 20.0
  LARGE = 25_000 # over the memo's 4 KiB threshold
  GROWTH_SLACK = 6 << 20 # RSS a loop of reads may add besides what the memo holds (glibc, GC pages)

  def setup
    @pids = []
    @dir = Strata::TestSupport.private_tmpdir
    @path = File.join(@dir, "memo.strata")
    @table = Strata::Tiers::SharedMemory.new(path: @path, size: SIZE)
  end

  def teardown
    kill_tracked_children
    @table.close
    FileUtils.remove_entry(@dir)
  end

  def test_repeat_hits_on_a_large_value_allocate_no_copy
    @table.set("big", "a" * LARGE)
    @table.get("big")
    GC.start
    before = GC.stat(:malloc_increase_bytes)
    100.times { assert_equal LARGE, @table.get("big").bytesize }
    assert_operator GC.stat(:malloc_increase_bytes) - before, :<, LARGE, "100 hits must not copy the value"
    assert_equal({memo_entries: 1, memo_bytes: LARGE}, @table.stats.slice(:memo_entries, :memo_bytes))
  end

  def test_small_values_are_not_memoized
    @table.set("small", "a" * 100)
    2.times { assert_equal "a" * 100, @table.get("small") }
    assert_equal 0, @table.stats[:memo_entries]
  end

  def test_what_a_hit_returns_is_the_callers_to_change
    @table.set("big", "a" * LARGE)
    first = @table.get("big")
    refute_predicate first, :frozen?
    first << "changed"
    first.setbyte(0, "z".ord)
    assert_equal "a" * LARGE, @table.get("big")
    assert_equal Encoding::BINARY, @table.get("big").encoding
  end

  def test_overwrite_delete_and_expiry_are_seen_on_the_next_read
    @table.set("big", "a" * LARGE)
    assert_equal "a" * LARGE, @table.get("big")
    @table.set("big", "b" * LARGE) # same length, new bytes
    assert_equal "b" * LARGE, @table.get("big")
    @table.set("big", "b" * LARGE) # same bytes, a new item
    assert_equal "b" * LARGE, @table.get("big")
    @table.delete("big")
    assert_nil @table.get("big")
    @table.set("big", "c" * LARGE, ttl: 0.5) # read back at once, then waited out
    assert_equal "c" * LARGE, @table.get("big")
    assert wait_until(2.0) { @table.get("big").nil? }, "expired value is a miss"
  end

  def test_another_process_writing_or_deleting_is_seen
    @table.set("big", "a" * LARGE)
    assert_equal "a" * LARGE, @table.get("big")
    assert_child { @table.set("big", "b" * LARGE) }
    assert_equal "b" * LARGE, @table.get("big")
    assert_child { @table.delete("big") }
    assert_nil @table.get("big")

    # A child that inherited the memo sees the parent's later write too.
    @table.set("big", "c" * LARGE)
    assert_equal "c" * LARGE, @table.get("big")
    reader = fork_tracked { wait_until(DEADLINE) { @table.get("big") == "d" * LARGE } }
    @table.set("big", "d" * LARGE)
    assert_predicate reap_child(reader), :success?
  end

  def test_get_multi_and_get_with_cas_use_the_memo_too
    @table.set("x", "x" * LARGE)
    @table.set("y", "y" * LARGE)
    assert_equal({"x" => "x" * LARGE, "y" => "y" * LARGE}, @table.get_multi(%w[x y]))
    bytes, token = @table.get_with_cas("x")
    assert_equal "x" * LARGE, bytes
    assert @table.cas("x", "z" * LARGE, token)
    assert_equal "z" * LARGE, @table.get_multi(%w[x])["x"]
  end

  def test_the_memo_keeps_within_memo_size
    table = Strata::Tiers::SharedMemory.new(path: @path, size: SIZE, memo_size: 3 * LARGE)
    5.times { |i| table.set("k#{i}", i.to_s * LARGE) }
    5.times { |i| assert_equal i.to_s * LARGE, table.get("k#{i}") }
    assert_equal({memo_entries: 3, memo_bytes: 3 * LARGE}, table.stats.slice(:memo_entries, :memo_bytes))
    5.times { |i| assert_equal i.to_s * LARGE, table.get("k#{i}") }
  ensure
    table&.close
  end

  # Entries age with Ruby's collections (value_memo.h, BOUNDS): one never hit goes while still
  # young; one hit stays as long as it is hit between collections, and once dropped its bytes
  # stay charged to memo_size until a major collection has freed it.
  def test_entries_age_with_garbage_collections
    @table.set("cold", "c" * LARGE)
    @table.set("hot", "h" * LARGE)
    without_automatic_gc do
      @table.get("cold")
      2.times { @table.get("hot") }
      2.times { GC.start(full_mark: false) }
      assert_equal({memo_entries: 1, memo_bytes: LARGE, memo_old_dropped_bytes: 0}, memo_stats)
      3.times do
        assert_equal "h" * LARGE, @table.get("hot")
        GC.start(full_mark: false)
      end
      assert_equal 1, @table.stats[:memo_entries], "hit between collections: kept"
      GC.start(full_mark: false)
      assert_equal({memo_entries: 0, memo_bytes: 0, memo_old_dropped_bytes: LARGE}, memo_stats)
      GC.start # major: what the old entry held is freed
      @table.get("cold")
      assert_equal({memo_entries: 1, memo_bytes: LARGE, memo_old_dropped_bytes: 0}, memo_stats)
    end
  end

  # Issue 21: a memo whose hot set moves on (several memo_size worth of values, each hit over a
  # few collections) left every set it dropped to the next major collection, and the process
  # grew by dozens of times memo_size. Minor collections only, as between two major ones.
  def test_memory_growth_stays_within_memo_size
    memo_size = 2 << 20
    table = Strata::Tiers::SharedMemory.new(path: @path, size: SIZE, memo_size: memo_size)
    sets = Array.new(3) { |s| Array.new(memo_size / LARGE) { |i| "set#{s}:#{i}" } }
    sets.flatten.each { |key| table.set(key, "v" * LARGE) }
    reader, writer = IO.pipe
    pid = fork_tracked do
      reader.close
      GC.disable
      start = nil
      40.times do |phase|
        4.times do
          sets[phase % 3].each { |key| table.get(key) }
          GC.start(full_mark: false)
        end
        start ||= rss_anon_bytes
      end
      writer.write((rss_anon_bytes - start).to_s)
    end
    writer.close
    assert_predicate reap_child(pid), :success?
    growth = Integer(reader.read)
    assert_operator growth, :<=, memo_size + GROWTH_SLACK,
      "anonymous RSS grew by #{growth >> 10} KiB with memo_size #{memo_size >> 10} KiB"
  ensure
    reader&.close
    table&.close
  end

  def test_memo_size_zero_turns_it_off
    table = Strata::Tiers::SharedMemory.new(path: @path, size: SIZE, memo_size: 0)
    table.set("big", "a" * LARGE)
    2.times { assert_equal "a" * LARGE, table.get("big") }
    assert_equal 0, table.stats[:memo_entries]
  ensure
    table&.close
  end

  def test_clear_empties_the_memo
    @table.set("big", "a" * LARGE)
    @table.get("big")
    @table.clear
    assert_nil @table.get("big")
    assert_equal({memo_entries: 0, memo_bytes: 0}, @table.stats.slice(:memo_entries, :memo_bytes))
  end

  def test_bad_memo_size
    [-1, 1.5, "8"].each do |bad|
      error = assert_raises(ArgumentError) { Strata::Tiers::SharedMemory.new(path: @path, size: SIZE, memo_size: bad) }
      assert_match(/memo_size/, error.message)
    end
  end

  private

  def memo_stats
    @table.stats.slice(:memo_entries, :memo_bytes, :memo_old_dropped_bytes)
  end

  def without_automatic_gc
    GC.disable
    yield
  ensure
    GC.enable
  end

  # This process's anonymous resident memory (heap, not the mapped table file).
  def rss_anon_bytes
    Integer(File.read("/proc/self/status")[/^RssAnon:\s+(\d+) kB/, 1]) * 1024
  end

  def assert_child(&)
    pid = fork_tracked(&)
    assert_predicate reap_child(pid), :success?
  end
end
