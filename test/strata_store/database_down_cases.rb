# frozen_string_literal: true

# StrataStore over L1 and a database server that dies mid-run (a throwaway server of the test's
# own, stopped as a crash would stop it): the app's requests never see an exception, reads fall
# back to L1 or miss, writes and deletes that did not reach the database are reported and leave
# their keys missing (deleted there once it is back), an invalidation it missed is made again,
# and after the restart everything else committed before the crash is still there (issue 34,
# findings 8 and 9). The including StoreCase starts @server (a ScriptedServer), connects Record
# to it, and sets @namespace.
module DatabaseDownCases
  BOUND = 10 # seconds for operations to resume after the restart

  def test_reads_fall_back_writes_are_reported_and_nothing_committed_is_lost
    cache = build_store(sql: {connection_class: self.class::Record}, namespace: @namespace)
    committed = (1..10).to_h { |i| ["committed-#{i}", "value #{i}"] }
    committed.each { |key, value| assert cache.write(key, value) }
    only_below = tier_key(cache, "committed-1")
    cache.stack[:l1].delete(only_below) # this one is in the database alone

    @server.crash
    reports = capture_reports do
      assert_equal "value 2", cache.fetch("committed-2") { flunk "L1 still holds it" }
      assert_nil cache.read("committed-1"), "the database is down and L1 never had it: a miss"
      # False, and the key misses everywhere: the database still holds what the change replaced.
      refute cache.write("committed-3", "written while down")
      assert_nil cache.read("committed-3")
      refute cache.delete("committed-4")
      assert_nil cache.read("committed-4")
      cache.write_multi("committed-5" => "written while down", "committed-6" => "too")
      assert_equal({}, cache.read_multi("committed-5", "committed-6"), "write_multi: missing, not the new nor the old value")
      cache.delete_multi(["committed-7"])
      assert_nil cache.read("committed-7"), "delete_multi"
    end
    assert(reports.any? { |report| report[:context][:tier] == :l3 }, "the failed SQL writes and reads are reported")

    @server.restart
    resumed = wait_until(BOUND) do
      cache.write("after", "v") && cache.stack[:l3].get(tier_key(cache, "after"))
    rescue Strata::TierError
      nil
    end
    refute_nil resumed, "writes reach the database again"
    missed = %w[committed-3 committed-4 committed-5 committed-6 committed-7]
    assert wait_until(BOUND) { cache.stack[:l3].get_multi(missed.map { |key| tier_key(cache, key) }).empty? },
      "the writes and the deletes it missed are made deletes there (Strata::Retries)"
    missed.each { |key| assert_nil cache.read(key), "#{key}: not its value from before" }
    kept = committed.keys - missed
    assert_equal kept.size, cache.stack[:l3].get_multi(kept.map { |key| tier_key(cache, key) }).size, "every other committed entry survived"
    assert_equal "value 1", cache.read("committed-1"), "and is served again"
  end

  # An invalidate_tags that the database (the versions' authority) missed returns false, and is
  # made again once it is back: the tag's version changes there, and what depended on it misses,
  # without another call.
  def test_an_invalidation_the_database_missed_is_made_once_it_is_back
    cache = build_store(sql: {connection_class: self.class::Record}, namespace: @namespace, coherence_interval: 0.2)
    cache.write("tagged", "old", tags: "bugs/1")
    before = Strata::TestSupport.version_in(cache, :l3, "bugs/1")
    refute_nil before

    @server.crash
    reports = capture_reports { refute cache.invalidate_tags("bugs/1"), "not made: reported as such" }
    assert(reports.any? { |report| report[:context][:tier] == :l3 })

    @server.restart
    # Made again: the retry's new version is there, or, when its write failed while the database
    # came back and its delete went through, no version is (the next read makes a new one).
    changed = wait_until(BOUND) do
      Strata::TestSupport.version_in(cache, :l3, "bugs/1") != before
    rescue Strata::TierError
      false
    end
    assert changed, "made again once the database is back"
    assert_nil cache.read("tagged")
  end
end
