# frozen_string_literal: true

require "test_helper"
require "strata/stack"
require "support/locked_shard"
require "support/waiting"

# The stack over two real shared-memory tables: :top (small values only) above :bottom.
class StackTest < Minitest::Test
  include Strata::LockedShard
  include Strata::Waiting

  Entry = Strata::Entry

  def run
    Strata::TestSupport.with_tmpdir do |dir|
      @top = Strata::Tiers::SharedMemory.new(path: File.join(dir, "top"), size: 1 << 20, segment_size: 8192,
        lock_timeout: 0.01)
      @bottom = Strata::Tiers::SharedMemory.new(path: File.join(dir, "bottom"), size: 4 << 20, lock_timeout: 0.01)
      @errors = []
      @stack = Strata::Stack.new({top: @top, bottom: @bottom}, on_error: ->(error, tier) { @errors << [error.class, tier] })
      super
    ensure
      @top&.close
      @bottom&.close
    end
  end

  # Makes tier's writes (set, set_multi) fail as a tier's do; its reads and deletes still work.
  def fail_writes(tier)
    failure = Strata::TierError.new("write failed", tier: :bottom)
    tier.define_singleton_method(:set) { |*, **| raise failure }
    tier.define_singleton_method(:set_multi) { |*, **| raise failure }
  end

  # Runs change once, right after tier's first read (name) returns inside the block: as a writer
  # would land between a reader's read and its copy into the tiers above.
  def between_read_and_copy(tier, change, name = :get)
    read = tier.method(name)
    pending = true
    tier.define_singleton_method(name) do |*args|
      result = read.call(*args)
      if pending
        pending = false
        change.call
      end
      result
    end
    yield
  ensure
    tier.singleton_class.send(:remove_method, name)
  end

  # Makes tier's deletes (delete, delete_multi) fail as well.
  def fail_deletes(tier)
    failure = Strata::TierError.new("delete failed", tier: :bottom)
    tier.define_singleton_method(:delete) { |*, **| raise failure }
    tier.define_singleton_method(:delete_multi) { |*, **| raise failure }
  end

  def entry(payload = "value", expires_at: 0)
    Entry.encode(payload, flags: Entry::UTF8, expires_at: expires_at)
  end

  def test_a_key_in_no_tier_is_a_miss
    info = {}

    assert_nil @stack.get("key", info)
    refute info.key?(:tier)
  end

  def test_the_top_tier_answers_first
    @top.set("key", entry("top"))
    @bottom.set("key", entry("bottom"))
    info = {}

    assert_equal entry("top"), @stack.get("key", info)
    assert_equal :top, info[:tier]
  end

  def test_a_hit_below_backfills_the_tiers_above
    @bottom.set("key", entry)
    info = {}

    assert_equal entry, @stack.get("key", info)
    assert_equal :bottom, info[:tier]
    assert_equal entry, @top.get("key")
  end

  def test_a_backfill_keeps_the_remaining_time_to_live
    @bottom.set("key", entry(expires_at: Entry.now + 300))
    @stack.get("key")

    assert @top.get("key")
    assert wait_until { @top.get("key").nil? }, "the backfilled copy should expire with the entry"
  end

  def test_an_expired_entry_is_not_backfilled
    @bottom.set("key", entry(expires_at: Entry.now - 1_000))

    assert @stack.get("key")
    assert_nil @top.get("key")
  end

  def test_counters_are_not_backfilled
    @bottom.incr("hits", 5, initial: 5)

    assert_equal "5", @stack.get("hits")
    assert_nil @top.get("hits")
  end

  def test_get_multi_reads_through_and_backfills
    @top.set("a", entry("a"))
    @bottom.set("b", entry("b"))
    info = {}

    assert_equal({"a" => entry("a"), "b" => entry("b")}, @stack.get_multi(%w[a b c], info))
    assert_equal :bottom, info[:tier]
    assert_equal entry("b"), @top.get("b")
  end

  def test_set_writes_every_tier
    assert @stack.set("key", entry)

    assert_equal entry, @top.get("key")
    assert_equal entry, @bottom.get("key")
  end

  def test_a_value_too_large_for_the_top_is_stored_below_and_the_old_top_copy_dropped
    @stack.set("key", entry("small"))
    large = entry("x" * 20_000)

    assert @stack.set("key", large)
    assert_nil @top.get("key")
    assert_equal large, @bottom.get("key")
    assert_equal large, @stack.get("key")
  end

  def test_a_value_too_large_for_every_tier_raises_and_leaves_no_old_copy
    @stack.set("key", entry("small"))

    assert_raises(Strata::ValueTooLargeError) { @stack.set("key", entry("x" * 5_000_000)) }
    assert_nil @stack.get("key")
  end

  # A counter written over a value lives in the tiers with counters only; a tier without them
  # (SQL) must not keep the value it replaced, to serve once the counter tier lets the key go.
  def test_a_counter_written_over_a_value_drops_it_from_the_tiers_without_counters
    require "strata/tiers/sql"
    Strata::TestSupport.with_tmpdir do |dir|
      sql = Strata::Tiers::SQL.new(path: File.join(dir, "l3.sqlite3"))
      stack = Strata::Stack.new({top: @top, bottom: sql}, on_error: ->(error, tier) { @errors << [error.class, tier] })
      stack.set("key", entry("old"))

      assert stack.set("key", "5")
      assert_nil sql.get("key")
      @top.delete("key") # the counter tier lets it go (an eviction)
      assert_nil stack.get("key"), "never the value the counter replaced"
    ensure
      sql&.close
    end
  end

  # A read that found a value below copies it up. A write or delete that lands between that read
  # and the copy (bottom-up, so it reached the top first) must not be hidden by the copy.
  def test_a_read_racing_a_write_or_delete_never_leaves_the_old_value_above
    {write: -> { @stack.set("key", entry("new")) }, delete: -> { @stack.delete("key") }}.each do |what, change|
      @stack.set("key", entry("old"))
      @top.delete("key") # only the bottom holds it
      between_read_and_copy(@bottom, change) do
        assert_equal entry("old"), @stack.get("key"), "#{what}: the read came first"
      end
      expected = (what == :write) ? entry("new") : nil
      assert_includes [nil, expected], @top.get("key"), "#{what}: never the old value above"
      if expected
        assert_equal expected, @stack.get("key")
      else
        assert_nil @stack.get("key")
      end
    end
  end

  def test_read_multi_racing_a_write_never_leaves_the_old_value_above
    @stack.set_multi({"a" => entry("old"), "b" => entry("old")})
    @top.delete_multi(%w[a b])
    between_read_and_copy(@bottom, -> { @stack.set("a", entry("new")) }, :get_multi) do
      assert_equal({"a" => entry("old"), "b" => entry("old")}, @stack.get_multi(%w[a b]))
    end
    assert_includes [nil, entry("new")], @top.get("a")
    assert_equal entry("old"), @top.get("b"), "an unchanged key keeps its copy"
    assert_equal({"a" => entry("new"), "b" => entry("old")}, @stack.get_multi(%w[a b]))
  end

  # A tier that refused the write keeps the value the write replaces unless it is dropped: a true
  # write would let it come back once the top lets the new value go. A shard whose lock can't be
  # taken refuses the write, and the drop fences the key there, so the old value never comes back.
  def test_a_write_the_bottom_refused_is_false_and_its_old_copy_reads_as_a_miss
    @stack.set("key", entry("old"))

    with_shard_locked(@bottom, "key") do
      refute @stack.set("key", entry("new"))
      assert_nil @bottom.get("key"), "fenced while the lock is held"
    end
    assert_includes @errors, [Strata::TierError, :bottom]
    @top.delete("key") # the top lets it go (an eviction)
    assert_nil @stack.get("key"), "never the value the write replaced"
  end

  # A failed write whose drop fails too leaves the tier's old copy: the write is false.
  def test_a_write_the_bottom_failed_and_could_not_drop_is_false
    @stack.set("key", entry("old"))
    fail_writes(@bottom)
    fail_deletes(@bottom)

    refute @stack.set("key", entry("new"))
    assert_equal entry("old"), @bottom.get("key"), "the value the write could not replace"
  end

  def test_a_write_the_bottom_failed_drops_its_old_copy_and_is_true
    @stack.set("key", entry("old"))
    fail_writes(@bottom)

    assert @stack.set("key", entry("new"))
    assert_includes @errors, [Strata::TierError, :bottom]
    assert_nil @bottom.get("key")
    @top.delete("key") # the top lets it go (an eviction)
    assert_nil @stack.get("key"), "never the value the write replaced"
  end

  def test_set_multi_drops_what_a_failed_tier_held
    @stack.set_multi({"a" => entry("old"), "b" => entry("old")})
    fail_writes(@bottom)

    assert_equal({"a" => true, "b" => true}, @stack.set_multi({"a" => entry("new"), "b" => entry("new")}))
    assert_nil @bottom.get("a")
    assert_nil @bottom.get("b")
  end

  def test_set_multi_is_false_for_a_key_a_failed_tier_could_not_drop
    @stack.set_multi({"key" => entry("old")})
    fail_writes(@bottom)
    fail_deletes(@bottom)

    refute @stack.set_multi({"key" => entry("new")})["key"]
    assert_equal entry("old"), @bottom.get("key"), "the value the write could not replace"
  end

  def test_set_multi_writes_every_tier
    entries = {"a" => entry("a"), "b" => entry("b")}

    assert_equal({"a" => true, "b" => true}, @stack.set_multi(entries))
    entries.each do |key, bytes|
      assert_equal bytes, @top.get(key)
      assert_equal bytes, @bottom.get(key)
    end
  end

  def test_set_multi_stores_a_value_too_large_for_the_top_below_and_drops_the_old_top_copy
    @stack.set("big", entry("small"))
    large = entry("x" * 20_000)

    results = @stack.set_multi({"big" => large, "small" => entry("s")})
    assert_nil @top.get("big")
    assert_equal large, @bottom.get("big")
    assert_equal entry("s"), @top.get("small")
    refute results["big"], "the top tier refused it"
    assert results["small"]
    assert_includes @errors, [Strata::PartialError, :top]
  end

  def test_set_multi_reports_a_tier_that_refuses
    other = (1..1000).map { |i| "other-#{i}" }.find { |key| @bottom._shard_for(key) != @bottom._shard_for("key") }
    with_shard_locked(@bottom, "key") do
      assert_equal({"key" => false, other => true}, @stack.set_multi({"key" => entry, other => entry}))
    end
    assert_includes @errors, [Strata::TierError, :bottom]
    assert_equal entry, @stack.get(other)
  end

  def test_set_multi_drops_copies_above_when_the_bottom_holds_another_value
    # A writer that stored at the bottom after this one: settle finds its value there.
    @bottom.define_singleton_method(:get_multi) { |keys| keys.to_h { |key| [key, "someone else's"] } }

    @stack.set_multi({"key" => entry})
    assert_nil @top.get("key"), "the copy above the bottom may be older than the bottom's"
  end

  def test_add_stores_only_when_no_tier_has_the_key
    assert @stack.add("fresh", entry)
    assert_equal entry, @top.get("fresh")
    assert_equal entry, @bottom.get("fresh")

    @bottom.set("below", entry("old"))
    refute @stack.add("below", entry("new"))
    assert_nil @top.get("below")
    assert_equal entry("old"), @bottom.get("below")
  end

  def test_delete_removes_from_every_tier
    @stack.set("key", entry)

    assert @stack.delete("key")
    assert_nil @top.get("key")
    assert_nil @bottom.get("key")
    refute @stack.delete("key")
  end

  def test_delete_multi_removes_from_every_tier_and_names_what_was_there
    @stack.set("a", entry)
    @bottom.set("b", entry)

    assert_equal %w[a b], @stack.delete_multi(%w[a b absent]).sort
    %w[a b].each { |key| assert_nil @stack.get(key) }
    assert_empty @stack.delete_multi(%w[a b])
  end

  def test_delete_multi_skips_and_reports_a_failing_tier
    @stack.set("key", entry)
    @bottom.define_singleton_method(:delete_multi) { |_keys| raise Strata::RetryableError.new("down", tier: :l1) }

    assert_equal ["key"], @stack.delete_multi(["key"])
    assert_includes @errors, [Strata::RetryableError, :bottom]
    assert_nil @top.get("key"), "the tiers that work still delete"
  end

  # A shared-memory tier whose shard lock is held elsewhere still deletes: the key reads as a miss.
  def test_delete_multi_through_a_locked_shard_deletes
    @stack.set("key", entry)

    with_shard_locked(@bottom, "key") { assert_equal ["key"], @stack.delete_multi(["key"]) }
    assert_empty @errors
    assert_nil @stack.get("key")
  end

  def test_invalidate_removes_from_tiers_without_stale_copies
    @stack.set("key", entry)
    @stack.invalidate("key")

    assert_nil @stack.get("key")
  end

  def test_counters_live_in_the_bottom_tier_and_copies_above_are_dropped
    @top.set("hits", "1")

    assert_equal 3, @stack.incr("hits", 3, initial: 3)
    assert_nil @top.get("hits")
    assert_equal "3", @bottom.get("hits")
    assert_equal 1, @stack.decr("hits", 2)
    assert_nil @stack.incr("missing")
  end

  def test_clear_cleanup_and_keys_cover_every_tier
    @top.set("a", entry)
    @bottom.set("b", entry)
    @bottom.set("gone", entry, ttl: 0.05)

    assert wait_until { @stack.cleanup >= 1 }
    assert_equal %w[a b], @stack.keys.sort
    @stack.clear
    assert_empty @stack.keys
  end

  def test_stats_are_kept_per_tier
    assert_equal %i[top bottom], @stack.stats.keys
    assert_equal %i[top bottom], @stack.tier_names
    assert_same @top, @stack[:top]
  end

  def test_a_failing_tier_is_skipped_and_reported
    @stack.set("key", entry("old"))

    with_shard_locked(@bottom, "key") do
      refute @stack.set("key", entry("new")), "the bottom tier refused the write"
      assert_nil @stack.incr("key")
      @stack.delete("key")
    end

    assert_includes @errors, [Strata::RetryableError, :bottom]
    assert_nil @top.get("key"), "the top copy is gone, so the old value is not served from it"
  end

  def test_a_stack_needs_a_tier
    assert_raises(ArgumentError) { Strata::Stack.new({}) }
  end

  # Every way an entry reaches the host tier (:top): a write, a write of many, an add, a
  # backfill, a read-through's fill. The bottom keeps the entries' own TTLs.
  def test_host_ttl_caps_the_ttl_of_every_entry_the_host_tier_takes
    stack = Strata::Stack.new({top: @top, bottom: @bottom}, host_ttl: 0.5)
    top = record_ttls(@top)
    bottom = record_ttls(@bottom)
    stack.set("set", entry, ttl: 60)
    stack.set("forever", entry)
    stack.set("short", entry, ttl: 0.1)
    stack.set_multi({"multi" => entry}, ttl: 60)
    stack.add("added", entry)
    @bottom.set("below", entry)
    stack.get("below")
    stack.read_through("filled") { |fill| fill.get || fill.set(entry, ttl: 60) }

    assert_equal [["set", 0.5], ["forever", 0.5], ["short", 0.1], ["multi", 0.5], ["added", 0.5], ["below", 0.5],
      ["filled", 0.5]], top
    assert_equal [["set", 60], ["forever", nil], ["short", 0.1], ["multi", 60], ["added", nil], ["below", nil],
      ["filled", 60]], bottom
    assert_equal entry, stack.get("filled")
  end

  def test_host_ttl_is_nil_or_a_positive_number
    assert_nil @stack.host_ttl
    [0, -1, "1"].each do |bad|
      assert_raises(ArgumentError) { Strata::Stack.new({top: @top}, host_ttl: bad) }
    end
  end

  private

  # [key, ttl] of each entry set or added into tier from now on (the stack's own keys left out).
  def record_ttls(tier)
    ttls = []
    %i[set add].each do |name|
      write = tier.method(name)
      tier.define_singleton_method(name) do |key, bytes, ttl: nil|
        ttls << [key, ttl] unless key.getbyte(0) == 0
        write.call(key, bytes, ttl: ttl)
      end
    end
    fill = tier.method(:add_for_fill) # SharedMemory's own, not through add
    tier.define_singleton_method(:add_for_fill) do |key, bytes, fence, ttl: nil|
      ttls << [key, ttl]
      fill.call(key, bytes, fence, ttl: ttl)
    end
    ttls
  end
end
