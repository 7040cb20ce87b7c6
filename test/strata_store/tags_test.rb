# frozen_string_literal: true

require_relative "store_case"
require "support/child_processes"

# Dependency tags (docs/coherence.md): fetch and write take tags:, invalidate_tags makes every
# entry built from a tag miss. Each property runs on every tier layout.
class StrataStoreTagsTest < Strata::StoreCase
  include Strata::TestSupport::ChildProcesses

  LAYOUTS = %i[l1 memcached l1_memcached l1_sql l1_memcached_sql].freeze
  DEADLINE = 30.0

  def setup
    @namespace = "tags-#{Process.pid}-#{rand(1 << 30)}"
    Strata::TestSupport.flush_memcached
  end

  def layout_l1_path
    File.join(@tmpdir, "#{@namespace}.strata")
  end

  # A store on layout's tiers; stores built with the same l1_path and sql_path share them (as the
  # processes of one host do), memcached is always shared. By default the files are the current
  # namespace's: tag versions are shared by every store on the same tiers, whatever its
  # namespace, so each layout a test walks gets tiers of its own (memcached is flushed before
  # each test).
  def layout_store(layout, l1_path: layout_l1_path, sql_path: File.join(@tmpdir, "#{@namespace}.sqlite3"), **options)
    tiers = {}
    tiers[:l1] = {path: l1_path, size: TABLE_SIZE} if layout.to_s.include?("l1")
    tiers[:memcached] = {servers: Strata::TestSupport.memcached_servers, timeout: 2} if layout.to_s.include?("memcached")
    tiers[:sql] = {path: sql_path} if layout.to_s.include?("sql")
    cache = ActiveSupport::Cache::StrataStore.new(namespace: @namespace, **tiers, **options)
    @stores << cache
    cache
  end

  def each_layout
    LAYOUTS.each do |layout|
      @namespace = "tags-#{layout}-#{Process.pid}-#{rand(1 << 30)}"
      yield layout_store(layout), layout
    end
  end

  # tag_versions then as_of: a value computed from data loaded after the versions were read
  # carries them, so a change committed between the read and the fetch makes it miss.
  def test_as_of_stamps_an_entry_with_the_versions_read_before_its_data
    each_layout do |cache|
      as_of = cache.tag_versions("posts/1", "posts")
      cache.invalidate_tags("posts/1") # a change committed after the versions were read
      assert_equal "loaded after", cache.fetch("fetched", tags: %w[posts/1 posts], as_of: as_of) { "loaded after" }
      assert_nil cache.read("fetched"), "stamped with the versions before the change"
      assert cache.write("written", "loaded after", tags: "posts/1", as_of: as_of)
      assert_nil cache.read("written")
      cache.write_multi({"multi" => "loaded after"}, tags: "posts/1", as_of: as_of)
      assert_nil cache.read("multi")
      assert_equal({"many" => "v"}, cache.fetch_multi("many", tags: "posts/1", as_of: as_of) { "v" })
      assert_nil cache.read("many")

      as_of = cache.tag_versions(["posts/1"])
      cache.fetch("kept", tags: "posts/1", as_of: as_of) { "current" }
      assert_equal "current", cache.read("kept"), "no change since: a hit"
    end
  end

  def test_as_of_must_hold_every_tag_and_be_read_by_tag_versions
    cache = layout_store(:l1)
    as_of = cache.tag_versions("posts/1")
    error = assert_raises(ArgumentError) { cache.write("k", "v", tags: %w[posts/1 posts/2], as_of: as_of) }
    assert_includes error.message, '"posts/2"'
    assert_raises(TypeError) { cache.fetch("k", tags: "posts/1", as_of: {1 => 2}) { "v" } }
    assert_raises(ArgumentError) { cache.tag_versions(42) }
  end

  def test_p1_the_invalidating_process_misses_at_once
    each_layout do |cache, layout|
      computed = 0
      assert_equal 1, cache.fetch("bug/42/json", tags: ["bugs/42", "projects/7"]) { computed += 1 }, layout
      assert_equal 1, cache.fetch("bug/42/json", tags: ["bugs/42", "projects/7"]) { computed += 1 }, layout
      cache.write("other", "kept", tags: ["bugs/43"])
      cache.write("plain", "kept")

      assert cache.invalidate_tags("bugs/42"), layout

      assert_nil cache.read("bug/42/json"), layout
      refute cache.exist?("bug/42/json"), layout
      assert_equal 2, cache.fetch("bug/42/json", tags: ["bugs/42", "projects/7"]) { computed += 1 }, layout
      assert_equal 2, cache.read("bug/42/json"), layout
      assert_equal "kept", cache.read("other"), layout
      assert_equal "kept", cache.read("plain"), layout
    end
  end

  def test_p1_another_store_on_the_same_tiers_sees_the_invalidation_at_once
    %i[l1 memcached l1_memcached_sql].each do |layout|
      @namespace = "tags-shared-#{layout}-#{rand(1 << 30)}"
      cache = layout_store(layout)
      other = layout_store(layout)
      cache.write("stats", 1, tags: ["projects/7"])
      assert_equal 1, other.read("stats"), layout

      other.invalidate_tags("projects/7")

      assert_nil cache.read("stats"), layout
    end
  end

  # P3: the block reads before an invalidation that lands while it runs; its value is returned
  # to its own caller, and never served after. The invalidation runs at a fixed point inside the
  # block: in another thread (joined), and in another process (reaped).
  def test_p3_a_fill_that_read_before_an_invalidation_is_never_served_after_it
    each_layout do |cache, layout|
      value = cache.fetch("report", tags: ["bugs/42"]) do
        Thread.new { cache.invalidate_tags("bugs/42") }.join
        "built from the old bug"
      end
      assert_equal "built from the old bug", value, layout

      assert_nil cache.read("report"), layout
      assert_equal "new", cache.fetch("report", tags: ["bugs/42"]) { "new" }, layout
    end
  end

  def test_p3_with_the_invalidation_in_another_process
    %i[l1 l1_memcached_sql].each do |layout|
      @namespace = "tags-p3-#{layout}-#{rand(1 << 30)}"
      cache = layout_store(layout)
      cache.fetch("report", tags: ["bugs/42"]) do
        pid = fork_child { layout_store(layout).invalidate_tags("bugs/42") }
        assert reap(pid, DEADLINE)&.success?, layout
        "old"
      end

      assert_nil cache.read("report"), layout
    end
  end

  # P4: losing the versions (every tier's copy) costs misses only: the versions are created
  # anew, fresh, and no old stamp matches them.
  def test_p4_deleting_the_versions_causes_misses_only
    each_layout do |cache, layout|
      cache.write("a", "old", tags: ["t1"])
      cache.fetch("b", tags: ["t1", "t2"]) { "old" }
      Strata::TestSupport.drop_versions(cache, "t1")

      assert_nil cache.read("a"), layout
      assert_nil cache.read("b"), layout
      assert_equal "new", cache.fetch("b", tags: ["t1", "t2"]) { "new" }, layout
      assert_equal "new", cache.read("b"), layout
    end
  end

  def test_clearing_the_cache_loses_versions_and_entries_together
    cache = layout_store(:l1)
    cache.write("a", "old", tags: ["t1"])
    cache.clear
    cache.write("b", "new", tags: ["t1"])

    assert_nil cache.read("a")
    assert_equal "new", cache.read("b")
  end

  def test_nested_fetches_pass_their_dependencies_to_the_outer_entry
    each_layout do |cache, layout|
      page = cache.fetch("page") do
        fragment = cache.fetch("fragment") { cache.fetch("bug/42/json", tags: "bugs/42") { "bug" } + "+fragment" }
        fragment + "+page"
      end
      assert_equal "bug+fragment+page", page, layout
      assert_equal "bug+fragment+page", cache.read("page"), layout

      cache.invalidate_tags("bugs/42")

      assert_nil cache.read("bug/42/json"), layout
      assert_nil cache.read("fragment"), layout
      assert_nil cache.read("page"), layout
    end
  end

  def test_an_outer_fetch_depends_on_the_tagged_entries_its_block_read
    each_layout do |cache, layout|
      cache.write("bug", "bug 42", tags: ["bugs/42"])
      cache.fetch("bug/json", tags: ["bugs/42/json"]) { "json" }
      # hits inside the block: a read, a fetch, and a read_multi
      cache.fetch("page") { [cache.read("bug"), cache.fetch("bug/json") { "unused" }].join }
      cache.fetch("list") { cache.read_multi("bug").values.join }

      cache.invalidate_tags("bugs/42/json")

      assert_nil cache.read("page"), layout
      assert_equal "bug 42", cache.read("list"), layout

      cache.invalidate_tags("bugs/42")

      assert_nil cache.read("list"), layout
    end
  end

  # Each store keeps its fiber's state in a slot of its own. Inside a fetch of another store (so
  # that one has a computation running too), a block of this store's fetch that reads the other
  # store's tagged entry takes no stamps from it (they are versions of the other store's tags;
  # the other store's computation takes them), and the other store's write of the same key is not
  # taken for this fetch's own.
  def test_a_second_store_read_inside_a_fetch_block_is_not_its_dependency
    each_layout do |cache, layout|
      other = layout_store(:l1, l1_path: File.join(@tmpdir, "other-#{layout}.strata"))
      other.write("bug", "bug 42", tags: ["bugs/42"])

      other.fetch("outer") { cache.fetch("page") { "#{other.read("bug")} seen" } }
      other.fetch("outer 2") do
        cache.fetch("bug", tags: ["bugs/7"]) { other.write("bug", "copied", tags: ["bugs/42"]) && "copied" }
      end

      assert_equal "bug 42 seen", cache.read("page"), layout
      assert_equal "copied", cache.read("bug"), layout
      assert_equal "copied", other.read("bug"), "#{layout}: written with its own tags"
      cache.invalidate_tags("bugs/42")
      assert_equal "bug 42 seen", cache.read("page"), "#{layout}: the other store's tag is not this store's"
      assert_equal "bug 42 seen", other.read("outer"), layout
      other.invalidate_tags("bugs/42")
      assert_nil other.read("bug"), layout
      assert_nil other.read("outer"), "#{layout}: the other store's computation took the stamps"
      assert_equal "bug 42 seen", cache.read("page"), layout
    end
  end

  # A hit outside any fetch block skips the capture's lookups while no computation runs in the
  # process (Computations); blocks that raised, fetches that missed, hit or nested must leave that
  # count right, so the block of a later fetch still takes what it reads.
  def test_a_fetch_after_blocks_that_raised_still_depends_on_what_it_read
    each_layout do |cache, layout|
      cache.write("bug", "bug 42", tags: ["bugs/42"])
      assert_equal "bug 42", cache.read("bug"), layout # a hit outside any block
      assert_raises(RuntimeError) { cache.fetch("broken", tags: ["bugs/42"]) { raise "boom" } }
      cache.fetch("page") { cache.read("bug") }
      assert_raises(RuntimeError) { cache.fetch("outer") { cache.fetch("inner") { raise "boom" } } }
      cache.fetch("list") { cache.fetch("json") { cache.read("bug") } }
      cache.fetch("summary") { cache.read("bug") }

      cache.invalidate_tags("bugs/42")

      %w[page list json summary].each { |key| assert_nil cache.read(key), "#{layout}: #{key}" }
    end
  end

  def test_an_entry_written_in_a_block_does_not_take_the_blocks_dependencies
    cache = layout_store(:l1)
    cache.fetch("outer", tags: ["t"]) do
      cache.write("side", "written")
      "outer"
    end

    cache.invalidate_tags("t")

    assert_nil cache.read("outer")
    assert_equal "written", cache.read("side")
  end

  def test_read_multi_and_fetch_multi_check_stamps
    each_layout do |cache, layout|
      cache.write("a", "a", tags: ["t"])
      cache.write("b", "b", tags: ["u"])
      cache.write("c", "c")
      values = cache.fetch_multi("x", "y", tags: ["t"]) { |name| name * 2 }
      assert_equal({"x" => "xx", "y" => "yy"}, values, layout)

      cache.invalidate_tags("t")

      assert_equal({"b" => "b", "c" => "c"}, cache.read_multi("a", "b", "c", "x", "y"), layout)
      computed = []
      values = cache.fetch_multi("x", "y", "b", tags: ["t"]) { |name| computed << name && name * 3 }
      assert_equal({"x" => "xxx", "y" => "yyy", "b" => "b"}, values, layout)
      assert_equal %w[x y], computed.sort, layout
    end
  end

  # read_multi takes L1's cached Strings in one call; what L1 lacks comes from below, and each
  # value comes back under its own name whichever way it went.
  def test_read_multi_mixes_l1_strings_with_what_the_tiers_below_hold
    cache = layout_store(:l1_sql)
    cache.write("in_l1", "one", tags: ["t"])
    cache.write("below", "two", tags: ["t"])
    cache.write("object", {"three" => 3}, tags: ["u"])
    l1 = ActiveSupport::Cache::StrataStore.new(l1: {path: layout_l1_path, size: TABLE_SIZE}, namespace: @namespace)
    l1.delete("below") # from L1 only: the SQL tier keeps it

    assert_equal({"object" => {"three" => 3}, "below" => "two", "in_l1" => "one"},
      cache.read_multi("object", "missing", "below", "in_l1"))
    assert_equal({"below" => "two"}, l1.read_multi("below"), "copied up to L1 by the read")

    cache.invalidate_tags("t")
    assert_equal({"object" => {"three" => 3}}, cache.read_multi("in_l1", "below", "object"))
  ensure
    l1&.close
  end

  def test_write_multi_with_tags
    cache = layout_store(:l1_memcached)
    cache.write_multi({"a" => 1, "b" => 2}, tags: ["t"])
    assert_equal({"a" => 1, "b" => 2}, cache.read_multi("a", "b"))

    cache.invalidate_tags(["t"])

    assert_empty cache.read_multi("a", "b")
  end

  def test_a_forced_fetch_and_a_race_condition_ttl_fetch_stamp_their_entries
    cache = layout_store(:l1_memcached)
    cache.fetch("forced", force: true, tags: ["t"]) { "v" }
    cache.fetch("racy", tags: ["t"], expires_in: 60, race_condition_ttl: 5) { "v" }

    cache.invalidate_tags("t")

    assert_nil cache.read("forced")
    assert_nil cache.read("racy")
  end

  def test_processes_sharing_one_l1_see_the_invalidation_at_once
    cache = layout_store(:l1)
    cache.write("from_parent", "p", tags: ["t"])

    pid = fork_child do
      child = layout_store(:l1)
      ok = child.read("from_parent") == "p"
      child.invalidate_tags("t")
      ok && child.write("from_child", "c", tags: ["u"])
    end
    assert reap(pid, DEADLINE)&.success?

    assert_nil cache.read("from_parent")
    assert_equal "c", cache.read("from_child")
    pid = fork_child { layout_store(:l1).invalidate_tags("u") }
    assert reap(pid, DEADLINE)&.success?

    assert_nil cache.read("from_child")
  end

  # Another host (its own L1) sees a bump within coherence_interval: its L1 copy of the version
  # expires, and the next read takes memcached's.
  def test_another_host_sees_the_invalidation_within_the_coherence_interval
    cache = layout_store(:l1_memcached, coherence_interval: 0.1)
    other = layout_store(:l1_memcached, l1_path: File.join(@tmpdir, "other-host.strata"), coherence_interval: 0.1)
    cache.write("stats", 1, tags: ["projects/7"])
    # A read that times out under load is a miss, which a cache may answer: the other host is to
    # hold the value before the bump, whatever one read said.
    assert wait_until(2) { other.read("stats") == 1 }

    cache.invalidate_tags("projects/7")

    assert_nil cache.read("stats")
    assert wait_until(2) { other.read("stats").nil? }
  end

  def test_invalidate_tags_emits_an_event_and_validates_its_arguments
    cache = layout_store(:l1)
    events = capture_events("invalidate.strata") { cache.invalidate_tags("a", :b, "a") }

    assert_equal [%w[a b a]], events.map { |payload| payload[:tags] }
    assert_equal [2], events.map { |payload| payload[:versions] }, "the versions bumped: one per distinct tag"
    assert_nil events.first[:caller], "no location unless Strata.trace_invalidations"
    begin
      Strata.trace_invalidations = true
      traced = capture_events("invalidate.strata") { cache.invalidate_tags("a") }
    ensure
      Strata.trace_invalidations = false
    end
    assert_match(/#{Regexp.escape(__FILE__)}:\d+/o, traced.first[:caller], "the caller's location")
    assert_raises(ArgumentError) { cache.invalidate_tags }
    assert_raises(ArgumentError) { cache.invalidate_tags("") }
    assert_raises(ArgumentError) { cache.invalidate_tags(42) }
    assert_raises(ArgumentError) { cache.write("k", 1, tags: [Object.new]) }
    assert_raises(ArgumentError) { cache.fetch("k", tags: [nil]) { 1 } }
    assert_raises(ArgumentError) { layout_store(:l1, coherence_interval: 0) }
  end

  def test_version_keys_are_never_listed_or_matched
    cache = layout_store(:l1)
    cache.write("a", 1, tags: ["t"])

    assert_equal 1, cache.delete_matched("*")
    assert_nil cache.read("a")
    cache.write("b", 2, tags: ["t"])
    assert_equal 2, cache.read("b")
  end

  def test_untagged_entries_are_written_as_before
    cache = layout_store(:l1)
    cache.write("plain", "v")
    cache.fetch("fetched") { "v" }

    %w[plain fetched].each do |name|
      bytes = cache.stack[:l1].get(tier_key(cache, name))
      refute Strata::Entry.stamped?(bytes)
      assert_empty Strata::Entry.decode(bytes).stamps
    end
  end

  def test_a_local_cache_forgets_what_it_held_on_invalidate_tags
    cache = layout_store(:l1)
    cache.with_local_cache do
      cache.write("a", 1, tags: ["t"])
      assert_equal 1, cache.read("a")

      cache.invalidate_tags("t")

      assert_nil cache.read("a")
    end
  end

  # Rails puts an expired entry back for race_condition_ttl before the block runs. That copy keeps
  # the stamps read with it: an invalidation that lands before the copy is written (here: the
  # first version read after the read, forced) makes it miss, as it would the entry it copies.
  def test_an_entry_put_back_for_race_condition_ttl_keeps_the_stamps_it_was_read_with
    %i[l1 l1_memcached].each do |layout|
      @namespace = "tags-race-#{layout}-#{rand(1 << 30)}"
      cache = layout_store(layout)
      other = layout_store(layout)
      cache.write("racy", "old", tags: ["t"], expires_in: 60, race_condition_ttl: 30)
      dependencies = cache.stack.dependencies
      invalidated = false
      dependencies.define_singleton_method(:versions) do |ids|
        cache.invalidate_tags("t") unless invalidated
        invalidated = true
        super(ids)
      end

      travel 61.seconds do
        seen = :unset
        value = cache.fetch("racy", tags: ["t"], expires_in: 60, race_condition_ttl: 30) do
          seen = other.read("racy")
          "new"
        end

        assert_equal "new", value, layout
        assert invalidated, layout
        assert_nil seen, layout
      end
    end
  end

  # The copies an invalidation left behind are dropped where they are read, so the refill (a
  # read-through fill: host lock, lease, fenced add) is stored in every tier, here and on a
  # host that reads the stale copy from memcached or SQL.
  def test_the_refill_after_an_invalidation_is_stored_in_every_tier
    each_layout do |cache, layout|
      computed = 0
      cache.fetch("page", tags: ["t"]) { computed += 1 }
      cache.invalidate_tags("t")

      assert_equal 2, cache.fetch("page", tags: ["t"]) { computed += 1 }, layout
      assert_equal 2, cache.fetch("page", tags: ["t"]) { computed += 1 }, layout
      key = tier_key(cache, "page")
      cache.stack.tier_names.each do |name|
        assert_equal 2, cache.send(:deserialize_entry, cache.stack[name].get(key))&.value, "#{layout} #{name}"
      end
      next if layout == :l1

      other = layout_store(layout, l1_path: File.join(@tmpdir, "host-#{layout}.strata"))
      assert_equal 2, other.fetch("page", tags: ["t"]) { computed += 1 }, layout
      cache.invalidate_tags("t")
      other.stack.dependencies.bump_local(Strata::Dependencies.tag_id("t")) if other.stack[:l1]

      assert_equal 3, other.fetch("page", tags: ["t"]) { computed += 1 }, layout
      assert_equal 3, other.fetch("page", tags: ["t"]) { computed += 1 }, layout
      assert_equal 3, cache.fetch("page", tags: ["t"]) { computed += 1 }, layout
    end
  end

  def test_fetch_multi_entries_do_not_depend_on_its_own_hits_but_the_fetch_around_it_does
    cache = layout_store(:l1_memcached)
    cache.write("a", "a", tags: ["t"])
    page = cache.fetch("page") { cache.fetch_multi("a", "x", tags: ["u"]) { |name| name * 2 }.values.join }
    assert_equal "axx", page

    cache.invalidate_tags("t")

    assert_equal "xx", cache.read("x")
    assert_nil cache.read("page")
    cache.fetch("page") { cache.fetch_multi("x") { |name| name * 3 }.values.join }
    cache.invalidate_tags("u")

    assert_nil cache.read("x")
    assert_nil cache.read("page")
  end

  # A local cache serves what it holds without the stack: what a block read from it still counts.
  def test_entries_a_local_cache_serves_count_as_dependencies
    cache = layout_store(:l1_memcached)
    cache.with_local_cache do
      cache.fetch("bug", tags: ["bugs/42"]) { "bug" }
      cache.write("other", "other", tags: ["bugs/43"])
      cache.fetch("page") { cache.read("bug") + "+page" }
      cache.fetch("list") { cache.read_multi("other").values.join }
      cache.fetch("multi") { cache.fetch_multi("bug") { flunk "a local hit" }.values.join }
    end

    cache.invalidate_tags("bugs/42")

    assert_nil cache.read("page")
    assert_nil cache.read("multi")
    assert_equal "other", cache.read("list")
    cache.invalidate_tags("bugs/43")

    assert_nil cache.read("list")
  end

  # Tagged reads, fills, nesting and invalidations bust no method or constant cache.
  def test_tagged_operations_leave_ruby_vm_stat_unchanged
    cache = layout_store(:l1_memcached_sql)
    workload = lambda do |operations|
      operations.times do |i|
        tag = "bugs/#{i % 7}"
        case i % 6
        when 0 then cache.fetch("page/#{i % 20}") { cache.fetch("bug/#{i % 7}", tags: [tag]) { i } }
        when 1 then cache.read("page/#{i % 20}")
        when 2 then cache.write("w/#{i % 20}", i, tags: [tag, "projects/1"])
        when 3 then cache.read_multi("w/#{i % 20}", "bug/#{i % 7}")
        when 4 then cache.fetch_multi("m/#{i % 20}", tags: [tag]) { |name| name }
        else cache.invalidate_tags(tag)
        end
      end
    end
    workload.call(600)
    before = Strata::TestSupport.vm_cache_state

    workload.call(3_000)

    assert_equal before, Strata::TestSupport.vm_cache_state
  end

  def test_an_out_of_date_entry_counts_as_absent_for_unless_exist
    each_layout do |cache, layout|
      cache.write("k", "old", tags: ["t"])
      refute cache.write("k", "other", unless_exist: true), layout
      cache.invalidate_tags("t")

      assert cache.write("k", "new", unless_exist: true), layout
      assert_equal "new", cache.read("k"), layout
    end
  end

  # An entry carries at most Entry::MAX_STAMPS stamps. A fetch whose block read entries of more
  # tags than that is not cached (reported once), and the app still gets its value; tags: given
  # directly beyond it is bad input.
  def test_a_computation_over_more_tags_than_an_entry_holds_is_served_and_not_cached
    # room for the versions of every tag beside the entries
    cache = ActiveSupport::Cache::StrataStore.new(namespace: @namespace, l1: {path: File.join(@tmpdir, "stamps.l1"), size: 64 << 20})
    @stores << cache
    per_entry = 1_000
    entries = (Strata::Entry::MAX_STAMPS / per_entry) + 1
    tags = Array.new(entries) { |i| Array.new(per_entry) { |j| "t/#{i}/#{j}" } }
    entries.times { |i| cache.write("part/#{i}", i, tags: tags[i]) }
    computed = 0
    reports = capture_reports do
      2.times do
        value = cache.fetch("whole") do
          computed += 1
          # A part read again if the table let it go (it failed once as a read, nil, on a
          # loaded machine): what is checked is how many stamps its parts hand the whole.
          Array.new(entries) { |i| cache.fetch("part/#{i}", tags: tags[i]) { i } }.sum
        end
        assert_equal (0...entries).sum, value
      end
    end

    assert_equal 2, computed, "not cached: the second fetch computes again"
    assert_nil cache.read("whole")
    assert_equal [Strata::TooManyStampsError], reports.map { |report| report[:error].class }.uniq
    assert_match(/whole.*at most #{Strata::Entry::MAX_STAMPS}/o, reports.first[:error].message)

    error = assert_raises(ArgumentError) do
      cache.write("direct", 1, tags: Array.new(Strata::Entry::MAX_STAMPS + 1) { |j| "d/#{j}" })
    end
    assert_match(/at most #{Strata::Entry::MAX_STAMPS} tags/o, error.message)
  end
end
