# frozen_string_literal: true

require_relative "store_case"
require_relative "layout_stores"

# stale_while_revalidate: in every layout: within the window after an entry expired, the fetch
# that takes the key's claim recomputes it while every other fetch answers the stale value at
# once (another thread on the host; another host too when memcached holds the claim), and the
# recomputed value replaces the stale one only if nothing changed the key meanwhile. Expiry is
# moved with Rails' time helpers; the other callers run inside the block, step by step.
class StrataStoreStaleWhileRevalidateTest < Strata::StoreCase
  include Strata::LayoutStores

  LAYOUTS.each do |name, tiers|
    define_method(:"test_#{name}_one_caller_recomputes_while_the_others_answer_the_stale_value") do
      cache = layout_store(tiers)
      other_host = layout_store(tiers, l1_path: File.join(@tmpdir, "other-host.l1")) if tiers.include?(:memcached)
      cache.write("page", "old", expires_in: 60, stale_while_revalidate: 60)

      travel 90.seconds do
        others = nil
        value = cache.fetch("page", expires_in: 60, stale_while_revalidate: 60) do
          others = Thread.new do
            [cache.fetch("page", stale_while_revalidate: 60) { "computed by another thread" },
              other_host&.fetch("page", stale_while_revalidate: 60) { "computed by another host" }]
          end.value
          "new"
        end

        assert_equal "new", value
        assert_equal ["old", ("old" if other_host)], others
        assert_equal "new", cache.read("page")
        assert_equal "new", cache.fetch("page") { flunk "the new value is live" }
      end
    end

    define_method(:"test_#{name}_a_write_or_delete_during_the_revalidation_wins") do
      cache = layout_store(tiers)
      cache.write("written", "old", expires_in: 60, stale_while_revalidate: 60)
      cache.write("deleted", "old", expires_in: 60, stale_while_revalidate: 60)

      travel 90.seconds do
        value = cache.fetch("written", expires_in: 60, stale_while_revalidate: 60) do
          Thread.new { cache.write("written", "written meanwhile") }.join
          "recomputed"
        end
        assert_equal "recomputed", value, "the caller gets what it computed"
        assert_equal "written meanwhile", cache.read("written")

        cache.fetch("deleted", expires_in: 60, stale_while_revalidate: 60) do
          Thread.new { cache.delete("deleted") }.join
          "recomputed"
        end
        assert_nil cache.read("deleted")
      end
    end

    define_method(:"test_#{name}_fetch_multi_revalidates_each_stale_name_once") do
      cache = layout_store(tiers)
      cache.write_multi({"a" => "old a", "b" => "old b"}, expires_in: 60, stale_while_revalidate: 60)

      travel 90.seconds do
        others = nil
        computed = []
        values = cache.fetch_multi("a", "b", "c", expires_in: 60, stale_while_revalidate: 60) do |key|
          computed << key
          # By then this caller holds the claims of both stale names (taken in order).
          others = Thread.new { cache.fetch_multi("a", "b", stale_while_revalidate: 60) { flunk "revalidated twice" } }.value if key == "c"
          "new #{key}"
        end

        assert_equal({"a" => "new a", "b" => "new b", "c" => "new c"}, values)
        assert_equal %w[a b c], computed
        assert_equal({"a" => "old a", "b" => "old b"}, others, "answered stale while this caller held the claims")
        assert_equal({"a" => "new a", "b" => "new b", "c" => "new c"}, cache.read_multi("a", "b", "c"))
      end
    end

    define_method(:"test_#{name}_past_the_window_or_invalidated_it_is_a_miss") do
      cache = layout_store(tiers)
      cache.write("old", "old", expires_in: 60, stale_while_revalidate: 60)
      cache.write("tagged", "old", expires_in: 60, stale_while_revalidate: 600, tags: ["bugs/1"])
      cache.invalidate_tags("bugs/1")

      travel 130.seconds do
        assert_equal "computed", cache.fetch("old", expires_in: 60, stale_while_revalidate: 60) { "computed" }
        assert_equal "computed", cache.fetch("tagged", expires_in: 60, stale_while_revalidate: 600) { "computed" }
      end
    end
  end

  def test_the_stale_answer_is_a_stale_hit_in_its_events
    cache = layout_store(%i[l1], logger: Logger.new(File::NULL, level: :debug), stale_while_revalidate: 60)
    cache.write("page", "old", expires_in: 60)

    travel 90.seconds do
      hits = nil
      cache.fetch("page", expires_in: 60) do
        hits = capture_events("cache_fetch_hit.active_support") do
          assert_equal "old", Thread.new { cache.fetch("page") { flunk "revalidated twice" } }.value
        end
        "new"
      end
      assert_equal [true], hits.map { |payload| payload[:stale] }
      assert_equal 1, cache.stats[:counters][:store][:stale_hits]
    end
  end

  def test_a_bad_window_is_refused_naming_the_option
    error = assert_raises(ArgumentError) { layout_store(%i[l1], stale_while_revalidate: 0) }
    assert_match(/stale_while_revalidate must be a number of seconds > 0/, error.message)
    cache = layout_store(%i[l1])
    assert_raises(ArgumentError) { cache.fetch("page", stale_while_revalidate: "a minute") { "x" } }
  end
end
