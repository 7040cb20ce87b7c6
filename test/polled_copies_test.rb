# frozen_string_literal: true

require_relative "strata_store/store_case"
require "strata/tiers/sql"

# The host tier's copies of tag versions under a poller (Dependencies#host_write, Poller#vouch;
# ext/strata/table.h, POLLED ITEMS): they live while the poller vouches for L1, not
# coherence_interval, and read as absent once it stops, so that what another host invalidated
# meanwhile is read from the SQL tier again, never from the old copy. The poller is driven by
# the test (Poller#round); "the vouch lapsed" is the word set in the past, as the clock would.
class PolledCopiesTest < Strata::StoreCase
  # coherence_interval: a plain copy's TTL, which the tests read back right after making one
  # and then wait out; long enough for the first on a loaded machine.
  INTERVAL = 0.5
  # Seconds a plain copy is given to lapse (its TTL is INTERVAL), on a loaded machine.
  LAPSE = 5

  def sql_path
    File.join(@tmpdir, "shared.sqlite3")
  end

  # A host: a store on its own L1 file over the shared SQLite file, whose poller thread is
  # stopped so that the test drives a poller of its own (Poller#round).
  def host(name)
    cache = ActiveSupport::Cache::StrataStore.new(l1: {path: File.join(@tmpdir, "#{name}.l1"), size: TABLE_SIZE},
      sql: {path: sql_path, invalidation_log: true}, coherence_interval: INTERVAL)
    @stores << cache
    cache.engine.poller.stop
    cache.stack[:l1].polled_until = 0
    l1, sql = Strata::Poller.sources(cache.stack.tier_names.map { |tier| cache.stack[tier] })
    poller = Strata::Poller.new(l1, sql, cache.stack.dependencies, on_error: ->(error, _) { raise error }, interval: 1,
      listen: false, gap_timeout: 10)
    [cache, poller]
  end

  def version_key(tag)
    format(Strata::Dependencies::KEY_FORMAT, Strata::Dependencies.tag_id(tag))
  end

  # Rounds until one leaves nothing for the next (the first after a fresh mark only finds its
  # place in the log). Bound: 10 rounds.
  def settle(poller)
    10.times { return unless poller.round }
    flunk "the poller did not settle"
  end

  # Makes L1's copy of tag's version one read from the SQL tier (Dependencies#copy_up, the one
  # path that writes a polled copy): the copy a creation or a bump leaves is a plain one.
  def copy_from_sql(cache, tag)
    cache.stack[:l1].delete(version_key(tag))
    cache.stack.dependencies.versions([Strata::Dependencies.tag_id(tag)])
    cache.stack[:l1].get(version_key(tag))
  end

  def fill(cache, key, tag, value = "#{key} built")
    cache.fetch(key, tags: [tag]) { value }
  end

  def test_a_round_that_read_the_whole_log_vouches_for_coherence_interval_past_its_start
    cache, poller = host("a")
    assert_equal 0, cache.stack[:l1].polled_until, "a new file vouches for nothing"

    before = Strata::Entry.now
    settle(poller)
    after = Strata::Entry.now

    assert_includes (before + INTERVAL * 1000).floor..(after + INTERVAL * 1000).ceil, cache.stack[:l1].polled_until
  end

  def test_while_vouched_a_copy_outlives_coherence_interval_and_after_the_vouch_it_reads_as_absent
    cache, poller = host("a")
    settle(poller)
    cache.stack[:l1].polled_until = Strata::Entry.now + 60_000 # as rounds every interval would keep it
    fill(cache, "page", "bugs/1")
    key = version_key("bugs/1")
    copy = copy_from_sql(cache, "bugs/1")
    assert_equal 8, copy&.bytesize

    sleep INTERVAL * 3 # past a plain copy's TTL
    assert_equal copy, cache.stack[:l1].get(key), "a polled copy does not lapse with coherence_interval"
    assert_equal "page built", cache.fetch("page", tags: ["bugs/1"]) { flunk "the hit ran its block" }

    cache.stack[:l1].polled_until = 1 # the poller stopped vouching
    assert_nil cache.stack[:l1].get(key), "no process reads a copy nobody vouches for"
    assert_equal "page built", cache.fetch("page", tags: ["bugs/1"]) { flunk "the version is the SQL tier's" },
      "the stamp is checked against the SQL tier's version instead"
    assert_equal copy, cache.stack[:l1].get(key), "the new copy is a plain one, live without a vouch"
    assert wait_until(LAPSE) { cache.stack[:l1].get(key).nil? }, "and lapses after coherence_interval, as without a poller"
  end

  # Another host's invalidation while this host's poller is stopped: its copy still says the old
  # version, but once the vouch lapses the entry is checked against the SQL tier and misses.
  def test_another_hosts_invalidation_is_not_hidden_behind_a_copy_once_the_poller_stops_vouching
    here, poller = host("here")
    there, _ = host("there")
    settle(poller)
    here.stack[:l1].polled_until = Strata::Entry.now + 60_000
    fill(here, "page", "bugs/1")
    old = copy_from_sql(here, "bugs/1")

    assert there.invalidate_tags(["bugs/1"])
    assert_equal old, here.stack[:l1].get(version_key("bugs/1")), "no round ran here: the copy is the old version"
    here.stack[:l1].polled_until = 1

    rebuilt = here.fetch("page", tags: ["bugs/1"]) { "page rebuilt" }
    assert_equal "page rebuilt", rebuilt
  end

  def test_a_round_applies_the_log_before_it_vouches_so_a_vouched_copy_is_never_older_than_its_start
    here, poller = host("here")
    there, _ = host("there")
    settle(poller)
    here.stack[:l1].polled_until = 1 # lapsed: the copy written now is a plain one
    fill(here, "page", "bugs/1")
    settle(poller)
    assert here.stack[:l1].polled_until > Strata::Entry.now
    fill(here, "page2", "bugs/2")
    copy_from_sql(here, "bugs/2") # a polled copy of bugs/2's version

    assert there.invalidate_tags(["bugs/1", "bugs/2"])
    settle(poller) # drops both copies, then vouches

    assert_nil here.stack[:l1].get(version_key("bugs/2"))
    assert_equal "page rebuilt", here.fetch("page2", tags: ["bugs/2"]) { "page rebuilt" }
  end

  def test_without_a_poller_copies_are_plain
    l1 = Strata::Tiers::SharedMemory.new(path: table_path, size: TABLE_SIZE)
    sql = Strata::Tiers::SQL.new(path: sql_path, invalidation_log: true)
    @stores << l1 << sql
    # A plain copy lives coherence_interval: a long one, so that only a polled copy's end (the
    # vouch withdrawn below) could make it absent, not a slow thread.
    stack = Strata::Stack.new({l1: l1, sql: sql}, coherence_interval: 60)
    l1.polled_until = Strata::Entry.now + 60_000
    stack.dependencies.versions([Strata::Dependencies.tag_id("bugs/1")])
    l1.polled_until = 1
    assert_equal 8, l1.get(version_key("bugs/1"))&.bytesize
  end

  def test_a_store_with_a_poller_keeps_polled_copies
    cache = ActiveSupport::Cache::StrataStore.new(l1: {path: table_path, size: TABLE_SIZE},
      sql: {path: sql_path, invalidation_log: true}, coherence_interval: INTERVAL)
    @stores << cache
    l1 = cache.stack[:l1]
    assert wait_until(10) { l1.polled_until > Strata::Entry.now }, "the store's poller vouches"
    cache.fetch("page", tags: ["bugs/1"]) { "built" } # the version is made: a plain copy
    assert wait_until(LAPSE) { l1.get(version_key("bugs/1")).nil? }, "the creation's copy lapses"
    cache.fetch("page", tags: ["bugs/1"]) { flunk "the SQL tier's version is the entry's" } # read from SQL: polled
    copied_at = Strata::Entry.now
    # Past a plain copy's TTL, the copy is still there while the poller vouches: a starved
    # poller thread makes it read as absent only until its next round.
    wait_until { Strata::Entry.now > copied_at + INTERVAL * 3000 }
    assert wait_until(LAPSE) { l1.get(version_key("bugs/1"))&.bytesize == 8 }, "a polled copy outlives coherence_interval"
  end

  # A bump's copy (and a creation's) is a plain one: nothing reads the SQL tier after it, so a
  # bump by another host that the poller applied in between would be hidden behind a polled one.
  def test_this_hosts_bump_leaves_a_plain_copy
    cache, poller = host("a")
    settle(poller)
    cache.stack[:l1].polled_until = Strata::Entry.now + 60_000
    assert cache.invalidate_tags(["bugs/1"])
    assert_equal 8, cache.stack[:l1].get(version_key("bugs/1"))&.bytesize
    assert wait_until(LAPSE) { cache.stack[:l1].get(version_key("bugs/1")).nil? }, "a bump's copy lapses after coherence_interval"
  end

  # A round that could not drop a copy the log names (memcached's, say) vouches for nothing. L1's
  # own copy can't stay readable that way: a delete L1 cannot make fences the key (table.h).
  def test_a_round_that_could_not_drop_a_copy_does_not_vouch
    here, poller = host("here")
    there, _ = host("there")
    settle(poller)
    here.stack[:l1].polled_until = 1
    assert there.invalidate_tags(["bugs/1"])
    here.stack.dependencies.stub(:drop_copies, false) { settle(poller) }
    assert_equal 1, here.stack[:l1].polled_until
    settle(poller)
    assert_operator here.stack[:l1].polled_until, :>, Strata::Entry.now
  end
end
