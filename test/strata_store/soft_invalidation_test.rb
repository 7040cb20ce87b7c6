# frozen_string_literal: true

require_relative "store_case"
require_relative "layout_stores"

# invalidate_tags(soft: true) in every layout: an entry built from the tags is stale for
# stale_for, not missing. A read answers it (stale: true in its event); of the fetches, the one
# that takes the key's claim recomputes it while the others answer the stale value (another
# thread of the host; another host too when memcached holds the claim); the recomputed value
# replaces the stale one unless something changed the key meanwhile; past the window, or after
# a hard invalidation of the tag, it misses. The other callers run inside the block, step by
# step.
class StrataStoreSoftInvalidationTest < Strata::StoreCase
  include Strata::LayoutStores

  LAYOUTS.each do |name, tiers|
    define_method(:"test_#{name}_one_caller_recomputes_while_the_others_answer_the_stale_value") do
      cache = layout_store(tiers)
      other_host = layout_store(tiers, l1_path: File.join(@tmpdir, "other-host.l1")) if tiers.include?(:memcached)
      cache.write("page", "old", tags: ["posts/1"])
      other_host&.read("page") # the other host holds a copy too (its L1)

      assert cache.invalidate_tags("posts/1", soft: true)
      events = []
      subscriber = ActiveSupport::Notifications.subscribe("cache_read.active_support") { |event| events << event.payload }
      assert_equal "old", cache.read("page")
      ActiveSupport::Notifications.unsubscribe(subscriber)
      assert_equal [true], events.map { |payload| payload[:stale] }, "a read answers it, stale"

      others = nil
      value = cache.fetch("page", tags: ["posts/1"]) do
        others = Thread.new do
          [cache.fetch("page", tags: ["posts/1"]) { "computed by another thread" },
            other_host&.fetch("page", tags: ["posts/1"]) { "computed by another host" }]
        end.value
        "new"
      end

      assert_equal "new", value
      assert_equal ["old", ("old" if other_host)], others
      assert_equal "new", cache.read("page")
      assert_equal "new", cache.fetch("page", tags: ["posts/1"]) { flunk "the new value is current" }
    end

    # The window is the tiers' own clock (the wall clock, as their TTLs), which Rails' time
    # helpers do not move: a short one, waited out.
    define_method(:"test_#{name}_past_the_window_or_after_a_hard_invalidation_it_misses") do
      cache = layout_store(tiers, stale_for: 0.5)
      cache.write("windowed", "old", tags: ["a"])
      cache.write("hardened", "old", tags: ["b"])
      invalidated = Strata::Clock.monotonic
      cache.invalidate_tags("a", soft: true)
      cache.invalidate_tags("b", soft: true, stale_for: 120)
      cache.invalidate_tags("b")

      assert_nil cache.read("hardened"), "the hard invalidation wins"
      assert_equal "old", cache.read("windowed")
      assert wait_until(10) { cache.read("windowed").nil? }, "the store's stale_for: 0.5"
      # The window is kept in whole milliseconds of the wall clock (Entry.now): it may end up to
      # 1 ms before 0.5 s on the monotonic clock.
      assert_operator Strata::Clock.monotonic - invalidated, :>=, 0.499, "not before the window's end"
    end

    define_method(:"test_#{name}_a_write_during_the_window_wins_over_the_recomputation") do
      cache = layout_store(tiers)
      cache.write("written", "old", tags: ["c"])
      cache.invalidate_tags("c", soft: true)

      value = cache.fetch("written", tags: ["c"]) do
        Thread.new { cache.write("written", "written meanwhile", tags: ["c"]) }.join
        "recomputed"
      end
      assert_equal "recomputed", value, "the caller gets what it computed"
      assert_equal "written meanwhile", cache.read("written")
    end

    define_method(:"test_#{name}_read_multi_answers_stale_and_fetch_multi_recomputes_each_name_once") do
      cache = layout_store(tiers)
      cache.write_multi({"a" => "old a", "b" => {"old" => "b"}}, tags: ["d"])
      cache.invalidate_tags("d", soft: true)
      assert_equal({"a" => "old a", "b" => {"old" => "b"}}, cache.read_multi("a", "b"))

      others = nil
      computed = []
      values = cache.fetch_multi("a", "b", "c", tags: ["d"]) do |key|
        computed << key
        # By then this caller holds the claims of both stale names.
        others = Thread.new { cache.fetch_multi("a", "b", tags: ["d"]) { flunk "recomputed twice" } }.value if key == "c"
        "new #{key}"
      end

      assert_equal({"a" => "new a", "b" => "new b", "c" => "new c"}, values)
      assert_equal %w[a b c], computed
      assert_equal({"a" => "old a", "b" => {"old" => "b"}}, others, "answered stale while this caller held the claims")
      assert_equal({"a" => "new a", "b" => "new b", "c" => "new c"}, cache.read_multi("a", "b", "c"))
    end

    define_method(:"test_#{name}_with_fail_safe_a_recomputation_that_raises_answers_the_stale_value") do
      cache = layout_store(tiers)
      cache.write("guarded", "old", tags: ["e"])
      cache.invalidate_tags("e", soft: true)

      reports = capture_reports do
        assert_equal "old", cache.fetch("guarded", tags: ["e"], fail_safe: 3600) { raise IOError, "the database is down" }
      end
      assert_equal [IOError], reports.map { |report| report[:error].class }
      assert_raises(IOError) { cache.fetch("unguarded", tags: ["e"]) { raise IOError, "no fallback" } }
    end
  end

  def test_entries_read_inside_a_computation_lend_it_their_old_stamps
    cache = layout_store(%i[l1])
    cache.write("inner", "old inner", tags: ["f"])
    cache.invalidate_tags("f", soft: true)
    outer = cache.fetch("outer", tags: ["g"]) { "built from #{cache.read("inner")}" }

    assert_equal "built from old inner", outer
    assert_equal "built from old inner", cache.read("outer"), "stale too, within the window"
    cache.invalidate_tags("f")
    assert_nil cache.read("outer"), "and missing once the tag is invalidated hard"
  end

  def test_bad_options_are_refused_naming_them
    cache = layout_store(%i[l1])
    assert_match(/soft:/, assert_raises(ArgumentError) { cache.invalidate_tags("t", soft: "yes") }.message)
    assert_match(/stale_for:/, assert_raises(ArgumentError) { cache.invalidate_tags("t", stale_for: 5) }.message)
    assert_match(/stale_for:/, assert_raises(ArgumentError) { cache.invalidate_tags("t", soft: true, stale_for: -1) }.message)
    assert_match(/stale_for:/, assert_raises(ArgumentError) { layout_store(%i[l1], stale_for: 0) }.message)
  end

  def test_the_event_says_soft_and_the_window
    cache = layout_store(%i[l1])
    payloads = []
    subscriber = ActiveSupport::Notifications.subscribe("invalidate.strata") { |event| payloads << event.payload }
    cache.invalidate_tags("h", soft: true, stale_for: 5)
    cache.invalidate_tags("h")
    ActiveSupport::Notifications.unsubscribe(subscriber)

    assert_equal [[true, 5.0], [nil, nil]], payloads.map { |payload| payload.values_at(:soft, :stale_for) }
  end
end
