# frozen_string_literal: true

require "securerandom"
require "minitest/mock"
require "strata/tiers/sql"
require "support/child_processes"

module Strata
  module TestSupport
    # The SQL tier's contract, run against each database by a test class that includes it and
    # defines:
    #
    #   build_tier(**options)  a Tiers::SQL on this class's database and table, which the class
    #                          closes and drops in its teardown; every call reaches the same table
    #
    # and sets @tier = build_tier in its setup. Rows are forged with literal SQL that Active
    # Record quotes for each database, so these helpers need no dialect of their own.
    module SqlTierContract
      include ChildProcesses

      SQL = Strata::Tiers::SQL
      # Seconds a forked child may take.
      DEADLINE = 30

      def test_is_a_tier_with_tombstones_and_versions_and_no_other_capability
        assert_kind_of Strata::Tier, @tier
        able = @tier.capabilities.select { |_, yes| yes }.keys
        assert_equal %i[tombstones listing sweeping versions], able - [:invalidation_log], "no leases, stale copies, cas or counters"
        assert_equal @tier.invalidation_log?, @tier.capabilities[:invalidation_log]
        assert_respond_to @tier, :keys
        assert_respond_to @tier, :cleanup
        assert_raises(NotImplementedError) { @tier.incr("n") }
        assert_raises(NotImplementedError) { @tier.get_with_cas("n") }
      end

      def test_contract_operations
        assert @tier.set("a", "1", ttl: 60)
        assert_equal "1", @tier.get("a")
        assert_nil @tier.get("missing")
        refute @tier.add("a", "2"), "add leaves a live key alone"
        assert_equal "1", @tier.get("a")
        assert @tier.add("b", "2", ttl: 1.5)
        assert_equal({"a" => "1", "b" => "2"}, @tier.get_multi(["a", "b", "c"]))
        assert_equal({}, @tier.get_multi([]))
        assert @tier.set("a", "3")
        assert_equal "3", @tier.get("a")

        assert @tier.delete("a")
        refute @tier.delete("a"), "nothing left to delete"
        assert_nil @tier.get("a")
        assert @tier.invalidate("b"), "invalidate deletes"
        assert_nil @tier.get("b")
      end

      def test_a_delete_leaves_a_tombstone_that_reads_as_a_miss_until_it_lapses
        tier = build_tier(tombstone_ttl: 30)
        tier.set("gone", "v")
        before = Strata::Entry.now
        assert tier.delete("gone")
        after = Strata::Entry.now

        assert_includes (-(after + 30_000))..-(before + 30_000), expires_at_of("gone"), "the negated time it lapses"
        assert_nil tier.get("gone")
        assert_equal({}, tier.get_multi(["gone"]))
        assert_equal [nil, row_ids.first], tier.get_for_fill("gone"), "a fill reads the tombstone's id"
        assert_equal [nil, SQL::NO_TOMBSTONE], tier.get_for_fill("never"), "and 0 where there is no row"
        refute tier.delete("gone"), "nothing live to delete"

        assert tier.add("gone", "added"), "add takes a tombstone's place"
        assert_equal ["added", nil], tier.get_for_fill("gone")
        tier.delete("gone")
        assert tier.set("gone", "set")
        assert_equal "set", tier.get("gone")
      end

      # A read-through's fill is stored over what its read found, and over nothing newer: a
      # delete made since the read (a tombstone the fill did not read) refuses it, as a live row
      # written since does.
      def test_a_fill_is_refused_by_a_delete_made_since_its_read
        _, token = @tier.get_for_fill("a")
        @tier.delete("a")
        refute @tier.add_for_fill("a", "filled", token), "deleted after the read of no row"
        assert_nil @tier.get("a")

        _, token = @tier.get_for_fill("a")
        assert @tier.add_for_fill("a", "filled", token), "the tombstone it read gives way"
        assert_equal "filled", @tier.get("a")

        @tier.delete("a")
        _, token = @tier.get_for_fill("a")
        @tier.delete("a")
        refute @tier.add_for_fill("a", "filled again", token), "a second delete since the read"
        refute @tier.add_for_fill("a", "unknown", nil), "nor without a token (its read failed)"

        @tier.set("b", "written")
        refute @tier.add_for_fill("b", "filled", SQL::NO_TOMBSTONE), "a live row refuses it"
        assert_equal "written", @tier.get("b")
        execute("UPDATE #{table} SET expires_at = #{-(Strata::Entry.now - 1)} WHERE key_hash = #{SQL.key_hash("a")}")
        assert @tier.add_for_fill("a", "late", SQL::NO_TOMBSTONE), "a lapsed tombstone refuses nothing"
        assert_equal "late", @tier.get("a")
      end

      def test_a_refused_fill_takes_back_only_its_own_row
        @tier.set("mine", "filled")
        assert @tier.retract_fill("mine", "filled")
        assert_nil @tier.get("mine")
        assert_operator expires_at_of("mine"), :<, 0, "a tombstone takes its place"

        @tier.set("mine", "written since")
        refute @tier.retract_fill("mine", "filled"), "a newer value stays"
        assert_equal "written since", @tier.get("mine")
        refute @tier.retract_fill("absent", "filled")
      end

      def test_replace_stores_only_over_the_value_it_names
        @tier.set("page", "stale", ttl: 60)
        refute @tier.replace("page", "something else", "new"), "the row holds another value"
        assert_equal "stale", @tier.get("page")
        assert @tier.replace("page", "stale", "new", ttl: 60)
        assert_equal "new", @tier.get("page")
        refute @tier.replace("page", "stale", "newer"), "a replace since wins"

        @tier.delete("page")
        refute @tier.replace("page", "new", "resurrected"), "a delete since wins"
        assert_nil @tier.get("page")
        refute @tier.replace("absent", "stale", "new")
        assert_nil @tier.get("absent")
      end

      def test_expiry_and_cleanup_keep_a_tombstone_until_it_lapses
        tier = build_tier(max_size: nil, expiry_batch_size: 10, expire_every: 1)
        tier.delete("t")
        tier.set("other", "v")
        assert_equal 1, count_rows("expires_at < 0"), "a pass left the tombstone at the front"
        assert_equal 0, tier.cleanup

        execute("UPDATE #{table} SET expires_at = #{-(Strata::Entry.now - 1)} WHERE key_hash = #{SQL.key_hash("t")}")
        tier.set("another", "v")
        assert_equal 0, count_rows("expires_at < 0"), "the next pass took it once lapsed"
        tier.delete("t")
        execute("UPDATE #{table} SET expires_at = #{-(Strata::Entry.now - 1)} WHERE key_hash = #{SQL.key_hash("t")}")
        assert_equal 1, tier.cleanup
      end

      def test_get_multi_across_many_batches
        keys = (1..300).map { |i| "many-#{i}" }
        keys.each_with_index { |key, i| @tier.set(key, i.to_s) if i.even? }
        found = @tier.get_multi(keys + ["many-2", "absent"])

        assert_equal 150, found.size
        keys.each_with_index { |key, i| i.even? ? assert_equal(i.to_s, found[key]) : assert_nil(found[key]) }
      end

      def test_ttl_sets_expires_at_and_expired_rows_read_as_misses
        before = Strata::Entry.now
        @tier.set("ttl", "v", ttl: 60)
        @tier.set("ttl-float", "v", ttl: 0.0015)
        @tier.set("forever", "v")
        @tier.set("zero", "v", ttl: 0)
        after = Strata::Entry.now

        assert_includes (before + 60_000)..(after + 60_000), expires_at_of("ttl")
        assert_includes (before + 2)..(after + 2), expires_at_of("ttl-float"), "a Float TTL rounds up to whole ms"
        assert_equal 0, expires_at_of("forever")
        assert_equal 0, expires_at_of("zero")

        @tier.set("negative", "v", ttl: -1)
        assert_nil @tier.get("negative"), "a negative TTL expires at once"
        execute("UPDATE #{table} SET expires_at = #{Strata::Entry.now - 1} WHERE key_hash = #{SQL.key_hash("ttl")}")
        assert_nil @tier.get("ttl")
        assert_equal({"forever" => "v"}, @tier.get_multi(["ttl", "forever", "negative"]))
        refute @tier.delete("ttl"), "deleting an expired row reports nothing deleted"
        assert_operator expires_at_of("ttl"), :<, 0, "and leaves a tombstone in its place"
      end

      def test_add_takes_the_place_of_an_expired_row
        @tier.set("k", "old", ttl: -1)
        assert @tier.add("k", "new", ttl: 60)
        assert_equal "new", @tier.get("k")
      end

      def test_binary_keys_and_values
        every_byte = (0..255).map(&:chr).join.b
        keys = [every_byte.byteslice(0, 250), every_byte.byteslice(6, 250), "\x00".b, "\xFF\xFE".b, "ключ"]
        keys.each_with_index { |key, i| assert @tier.set(key, every_byte + i.chr) }

        keys.each_with_index do |key, i|
          value = @tier.get(key)
          assert_equal every_byte + i.chr, value
          assert_equal Encoding::BINARY, value.encoding
        end
        assert_equal keys.size, @tier.get_multi(keys).size
        assert_equal "#{every_byte}\x04".b, @tier.get("ключ".b), "a key is its bytes, whatever its encoding"
        assert_equal ["ключ"], @tier.get_multi(["ключ"]).keys, "get_multi answers with the caller's keys"
      end

      def test_key_limits
        assert @tier.set("k" * 250, "v")
        assert_equal "v", @tier.get("k" * 250)
        error = assert_raises(ArgumentError) { @tier.set("k" * 251, "v") }
        assert_match(/251 bytes/, error.message)
        assert_raises(ArgumentError) { @tier.get("") }
        assert_raises(TypeError) { @tier.get(:symbol) }
        assert_raises(TypeError) { @tier.set("k", 42) }
      end

      def test_a_bad_ttl_raises_and_writes_nothing
        [[Float::INFINITY, ArgumentError], [Float::NAN, ArgumentError], ["60", TypeError]].each do |ttl, error|
          assert_raises(error) { @tier.set("bad ttl", "v", ttl: ttl) }
          assert_raises(error) { @tier.add("bad ttl", "v", ttl: ttl) }
          assert_raises(error) { @tier.set_multi({"bad ttl" => "v"}, ttl: ttl) }
        end
        assert_equal 0, count_rows
      end

      # Two keys with the same key_hash share one row: reading either key compares the full key,
      # so the one not stored reads as a miss, never as the other's value.
      def test_a_hash_collision_reads_as_a_miss
        insert_rows([{key_hash: SQL.key_hash("victim"), key: "impostor", value: "wrong"}])

        assert_nil @tier.get("victim")
        assert_equal({}, @tier.get_multi(["victim"]))
        refute @tier.delete("victim")
        assert_equal 1, count_rows, "deleting the victim leaves the impostor's row"

        assert @tier.add("victim", "right"), "add takes a slot another key holds"
        assert_equal "right", @tier.get("victim")
        assert_nil @tier.get("impostor"), "the row moved to the new key"
        assert_equal 1, count_rows
      end

      def test_a_value_over_max_value_size_writes_nothing
        tier = build_tier(max_value_size: 100)
        assert tier.set("fits", "v" * 100)

        error = assert_raises(Strata::ValueTooLargeError) { tier.set("big", "v" * 101) }
        assert_match(/101 bytes/, error.message)
        assert_match(/max_value_size is 100/, error.message)
        assert_match(/"big"/, error.message)
        assert_raises(Strata::ValueTooLargeError) { tier.add("big", "v" * 101) }
        assert_nil tier.get("big")
        assert_equal 1, count_rows
      end

      def test_set_multi_writes_every_entry_in_one_transaction
        @tier.set("old", "before")
        entries = (1..40).to_h { |i| ["sm-#{i}", "value #{i}"] }.merge("old" => "after")

        assert_equal entries.transform_values { true }, @tier.set_multi(entries, ttl: 60)
        assert_equal entries, @tier.get_multi(entries.keys)
        assert_equal 41, count_rows
        assert_equal({}, @tier.set_multi({}))
      end

      def test_set_multi_with_a_bad_value_writes_nothing
        assert_raises(TypeError) { @tier.set_multi({"good" => "v", "bad" => 42}) }
        assert_raises(ArgumentError) { @tier.set_multi({"good" => "v", "" => "v"}) }
        assert_equal 0, count_rows
      end

      def test_set_multi_stores_the_rest_and_drops_a_value_over_max_value_size
        tier = build_tier(max_value_size: 100)
        tier.set("big", "old")

        error = assert_raises(Strata::PartialError) { tier.set_multi({"big" => "v" * 101, "fits" => "v" * 100}) }
        assert_kind_of Strata::ValueTooLargeError, error.cause
        assert_match(/"big"/, error.message)
        assert_equal({"big" => false, "fits" => true}, error.result)
        assert_nil tier.get("big"), "the old value is gone, not left stale"
        assert_equal "v" * 100, tier.get("fits")
      end

      def test_set_multi_runs_the_expiry_passes_its_writes_make_due
        row_bytes = 100
        max_size = 50 * row_bytes
        batch = 10
        tier = build_tier(max_size: max_size, expiry_batch_size: batch, expire_every: batch)

        10.times do |round|
          tier.set_multi((0...50).to_h { |i| [format("m%02d%02d", round, i), "v" * 95] })
          assert_operator total_bytes, :<=, max_size + 50 * row_bytes, "after burst #{round + 1}"
        end
        assert_operator tier.stats[:expiry_passes], :>=, 45
        assert_operator total_bytes, :<=, max_size + batch * row_bytes
      end

      def test_a_transaction_that_raises_writes_nothing
        database = @tier.instance_variable_get(:@database)
        assert_raises(RuntimeError) do
          database.run(:test) do |c|
            database.transaction(c) do
              binds = @tier.send(:write_binds, "inside", "v", nil, Strata::Entry.now)
              database.write(c, :test, @tier.send(:statements).set, binds)
              raise "boom"
            end
          end
        end
        assert_nil @tier.get("inside")
        assert @tier.set("after", "v"), "the connection is usable again"
      end

      def test_keys_lists_the_live_rows_only
        @tier.set("live", "v")
        @tier.set("lasting", "v", ttl: 60)
        @tier.set("expired", "v", ttl: -1)
        @tier.set("deleted", "v")
        @tier.delete("deleted")
        @tier.set("binary\xFF".b, "v")

        assert_equal ["binary\xFF".b, "lasting", "live"], @tier.keys.map(&:b).sort
      end

      def test_clear
        3.times { |i| @tier.set("c#{i}", "v") }
        assert @tier.clear
        assert_equal 0, count_rows
        assert_nil @tier.get("c0")
      end

      def test_cleanup_deletes_every_expired_row_and_keeps_the_rest
        expired = 2 * SQL::Statements::CLEANUP_STEP + 100 # three steps
        insert_rows((1..expired).map { |i| {key: "dead-#{i}", expires_at: 1} })
        @tier.set("live", "v", ttl: 60)
        @tier.set("forever", "v")

        assert_equal expired, @tier.cleanup
        assert_equal 2, count_rows
        assert_equal 0, @tier.cleanup
      end

      def test_cleanup_deletes_rows_older_than_max_age
        tier = build_tier(max_age: 60)
        insert_rows([{key: "old", created_at: Strata::Entry.now - 61_000}, {key: "young"}])

        assert_equal 1, tier.cleanup
        assert_equal "v", tier.get("young")
      end

      def test_stats
        @tier.set("s1", "12345")
        @tier.add("s1", "x")
        @tier.get("s1")
        @tier.get("s2")
        @tier.get_multi(["s1", "s2", "s3"])
        @tier.delete("s1")
        @tier.set("s4", "678")

        stats = @tier.stats
        assert_equal 2, stats[:hits]
        assert_equal 3, stats[:misses]
        assert_equal 2, stats[:sets], "a refused add stores nothing"
        assert_equal 1, stats[:deletes]
        assert_equal 2, stats[:entries], "s4, and the tombstone of s1"
        assert_equal "s1".bytesize + "s4".bytesize + "678".bytesize, stats[:bytes], "a tombstone's bytes are its key's"
        assert_equal 1024 * 1024, stats[:max_value_size]
      end

      # Expired rows at the front of the FIFO: each pass deletes one batch of them, oldest first,
      # never more, however many are waiting.
      def test_an_expiry_pass_deletes_at_most_one_batch_oldest_first
        tier = build_tier(max_size: nil, expiry_batch_size: 10, expire_every: 5)
        insert_rows((1..100).map { |i| {key: format("old-%03d", i), expires_at: 1} })
        old_ids = row_ids

        4.times { |i| tier.set("new-#{i}", "v") }
        assert_equal 104, count_rows, "no pass before the fifth write"
        tier.set("new-4", "v")
        assert_equal 95, count_rows, "the fifth write ran one pass first: 100 + 5 - 10"
        assert_equal old_ids.drop(10), row_ids & old_ids, "the pass took the oldest ten"

        rows = count_rows
        (5...60).each do |i|
          tier.set("new-#{i}", "v")
          deleted = rows + 1 - count_rows
          assert_operator deleted, :<=, 10, "write #{i + 1} deleted #{deleted} rows"
          rows = count_rows
        end
        assert_equal 60, count_rows, "after 12 passes every expired row is gone, every new one kept"
        assert_equal 100, tier.stats[:expired]
        assert_equal 12, tier.stats[:expiry_passes]
      end

      def test_max_size_holds_within_one_batch_after_a_burst
        row_bytes = 100 # a 5-byte key and a 95-byte value
        max_size = 50 * row_bytes
        batch = 10
        tier = build_tier(max_size: max_size, expiry_batch_size: batch, expire_every: batch)

        500.times do |i|
          tier.set(format("k%04d", i), "v" * 95)
          bytes = total_bytes
          assert_operator bytes, :<=, max_size + batch * row_bytes, "after write #{i + 1}"
        end
        assert_operator total_bytes, :>=, max_size - batch * row_bytes, "eviction stops once the table fits"
        assert_equal "v" * 95, tier.get("k0499"), "the newest rows stay"
        assert_nil tier.get("k0000"), "the oldest rows went first"
        assert_operator tier.stats[:evicted], :>=, 500 - 60
      end

      # Past Statements::EXACT_SPAN ids and EXACT_ROWS rows a pass estimates the table's size;
      # over budget it still deletes a batch from the front, and no more.
      def test_a_large_table_is_sized_by_a_sample_and_still_evicted_a_batch_at_a_time
        rows = SQL::Statements::EXACT_SPAN + 10_000
        insert_rows((1..rows).map { |i| {key: "bulk-#{i}"} })
        tier = build_tier(max_entries: rows - 5_000, expiry_batch_size: 100, expire_every: 1)

        tier.set("one more", "v")
        assert_equal rows + 1 - 100, count_rows, "one pass: a batch out, the write in"
        assert_equal 100, tier.stats[:evicted]
        assert_nil tier.get("bulk-1"), "the oldest went first"
        assert_equal "v", tier.get("bulk-#{rows}")
      end

      # Rewrites of hot keys leave what the review found: a few rows written long ago at the bottom
      # of a wide id span, the hot rows at its top. One window scaled to the whole span took the
      # hot rows for a full table and evicted the cold ones. A table this small is counted exactly.
      def test_a_small_table_over_a_wide_id_span_is_counted_exactly
        top = SQL::Statements::EXACT_SPAN * 5
        insert_rows((1..100).map { |i| {id: i, key: "cold-#{i}"} } + (1..100).map { |i| {id: top + i, key: "hot-#{i}"} })
        tier = build_tier(max_entries: 1_000, expiry_batch_size: 100, expire_every: 1)

        300.times { |i| tier.set("hot-#{i % 100 + 1}", "v") }
        assert_equal 0, tier.stats[:evicted]
        assert_equal 100, tier.get_multi((1..100).map { |i| "cold-#{i}" }).size
      end

      # Past EXACT_ROWS rows a pass estimates the table's size. Here the density climbs steeply
      # towards the newest ids, as rewrites leave it. Over every possible set of window starts,
      # the estimate of this table lies between 0.63x and 1.44x of its true count (a review
      # worked out the exact distribution), so neither side of a bound 1.5x away is mistaken for
      # the other.
      def test_an_unevenly_filled_large_table_is_sized_on_the_right_side_of_its_bound
        random = Random.new(3)
        span = 200_000
        ids = (1..span).select { |id| random.rand < 0.01 + 0.9 * id.fdiv(span)**8 }
        insert_rows(ids.map { |id| {id: id, key: "row-#{id}"} })

        roomy = build_tier(max_entries: (ids.size * 1.5).ceil, expiry_batch_size: 100, expire_every: 1)
        50.times { |i| roomy.set("roomy-#{i}", "v") }
        assert_equal 0, roomy.stats[:evicted], "#{ids.size} rows under a bound of #{(ids.size * 1.5).ceil}"

        full = build_tier(max_entries: (ids.size / 1.5).floor, expiry_batch_size: 100, expire_every: 1)
        full.set("full", "v")
        assert_equal 100, full.stats[:evicted], "#{ids.size + 50} rows over a bound of #{(ids.size / 1.5).floor}"
      end

      def test_max_entries_holds_within_one_batch
        tier = build_tier(max_entries: 20, expiry_batch_size: 5, expire_every: 5)
        100.times { |i| tier.set("e#{i}", "v") }

        assert_operator count_rows, :<=, 25
        assert_equal "v", tier.get("e99")
      end

      def test_expired_rows_go_under_max_entries_alone
        tier = build_tier(max_entries: 100, max_size: nil, expiry_batch_size: 10, expire_every: 1)
        insert_rows((1..3).map { |i| {key: "gone-#{i}", expires_at: Strata::Entry.now - 1_000} })

        tier.set("kept", "v")
        assert_equal 1, count_rows, "the expired rows went, the write stayed"
      end

      def test_max_age_expires_old_rows_a_batch_at_a_time
        tier = build_tier(max_age: 60, expiry_batch_size: 10, expire_every: 1)
        insert_rows((1..15).map { |i| {key: "aged-#{i}", created_at: Strata::Entry.now - 61_000} })

        tier.set("fresh", "v")
        assert_equal 6, count_rows, "one pass: ten aged rows out, the write in"
        tier.set("fresh", "v")
        assert_equal 1, count_rows
      end

      # Within budget a pass looks only at the front's expired and aged rows: live rows between
      # them stay, and rows past the front's batch wait for a later pass.
      def test_a_pass_within_budget_takes_the_expired_and_aged_rows_of_the_front_only
        tier = build_tier(max_entries: 1_000, max_age: 60, expiry_batch_size: 10, expire_every: 1)
        now = Strata::Entry.now
        kinds = [{expires_at: now - 1_000}, {}, {created_at: now - 61_000}, {expires_at: now + 60_000}]
        insert_rows((1..20).map { |i| {key: format("mixed-%02d", i)}.merge(kinds[(i - 1) % 4]) })

        tier.set("write", "v")
        keys = (1..20).map { |i| format("mixed-%02d", i) }
        gone = keys.first(10).select.with_index { |_key, i| [0, 2].include?(i % 4) }
        kept = (keys + ["write"]).select { |key| count_rows("key_hash = #{SQL.key_hash(key)}") == 1 }
        assert_equal keys + ["write"] - gone, kept, "the first ten ids lost their 3 expired and 2 aged rows"
        assert_equal 5, tier.stats[:expired]
        assert_equal 0, tier.stats[:evicted]
      end

      # A rewrite takes a new id, so the FIFO order is the order of last writes.
      def test_a_rewritten_row_moves_to_the_back
        tier = build_tier(max_entries: 2, expiry_batch_size: 10, expire_every: 10)
        %w[a b c a].each { |key| tier.set(key, key) }
        bounded = build_tier(max_entries: 2, expiry_batch_size: 10, expire_every: 1)

        bounded.set("d", "d") # one pass over a, b, c, then the write
        assert_nil bounded.get("b"), "b was written longest ago"
        assert_equal %w[a c d], %w[a b c d].select { |key| bounded.get(key) }
      end

      def test_a_forked_child_uses_its_own_connections
        @tier.set("before-fork", "parent")
        pid = fork_child do
          @tier.get("before-fork") == "parent" && @tier.set("from-child", "child") && @tier.get_multi(["from-child"]).size == 1
        end
        status = reap(pid, DEADLINE)

        refute_nil status, "the child finished within #{DEADLINE}s"
        assert_predicate status, :success?
        assert_equal "child", @tier.get("from-child"), "the parent sees the child's write"
        assert @tier.set("after-fork", "parent"), "the parent's connections still work"
        assert_equal "parent", @tier.get("after-fork")
      end

      def test_threads_share_the_tier
        threads = 4.times.map do |t|
          Thread.new do
            50.times.all? do |i|
              key = "t#{t}-#{i % 10}"
              @tier.set(key, "#{t}:#{i}") && @tier.get(key) == "#{t}:#{i}"
            end
          end
        end
        assert threads.map(&:value).all?
      end

      # Rails turns the query cache on for every pool during a request. A write from another
      # thread does not clear this thread's cache, so only reads that bypass it see the write.
      # The clock stands still, as it may between two reads: the reads' binds (now) are equal.
      def test_reads_bypass_the_query_cache
        @tier.set("cached", "1")
        Strata::Entry.stub(:now, Strata::Entry.now) do
          @tier.connection_class.connection_pool.with_connection do |c|
            c.cache do
              assert_equal "1", @tier.get("cached")
              assert_equal({"cached" => "1"}, @tier.get_multi(["cached"]))
              Thread.new { @tier.set("cached", "2") }.join
              assert_equal "2", @tier.get("cached")
              assert_equal({"cached" => "2"}, @tier.get_multi(["cached"]))
            end
          end
        end
      end

      def test_a_missing_table_raises_a_tier_error
        tier = SQL.new(connection_class: @tier.connection_class, table_name: "strata_missing_#{SecureRandom.hex(4)}")
        error = assert_raises(Strata::TierError) { tier.get("k") }
        assert_equal :l3, error.tier
        assert_match(/strata_missing_/, error.message)
        # The database's own error stays as the cause: Active Record's, or SQLite's when the tier
        # ran the statement on SQLite's connection.
        require "sqlite3"
        causes = [ActiveRecord::StatementInvalid, ::SQLite3::Exception]
        assert causes.any? { |klass| error.cause.is_a?(klass) }, "cause: #{error.cause.inspect}"
      end

      def test_create_table_is_idempotent
        assert SQL.create_table!(@tier.connection_class, table_name: table)
        assert SQL.create_table!(@tier.connection_class, table_name: table)
        @tier.set("k", "v")
        assert_equal "v", @tier.get("k")
        assert_raises(ArgumentError) { SQL.create_table!(@tier.connection_class, table_name: "bad name") }
      end

      # Tag versions live in the versions table, by tag id: never evicted, never listed, each
      # value the version's 8 bytes. A key is only a key, whatever it looks like.
      def test_versions_are_rows_of_the_versions_table_by_tag_id
        tier = build_tier(max_entries: 1, expiry_batch_size: 10, expire_every: 1)
        first, second = [Strata::Dependencies.tag_id("bugs/42"), Strata::Dependencies.tag_id("bugs")]
        version = [Strata::Dependencies::MASK].pack("Q<")

        assert tier.capabilities[:versions]
        assert tier.set_version(first, version)
        assert tier.add_version(second, [7].pack("Q<"))
        refute tier.add_version(first, [8].pack("Q<")), "insert if absent"
        3.times { |i| tier.set("entry-#{i}", "v") }
        assert_equal({first => version, second => [7].pack("Q<")}, tier.get_versions([first, second, 5]), "max_entries does not reach them")
        assert_equal({first => version}, tier.peek_versions([first]))
        assert_equal [[first, Strata::Dependencies::MASK]], select_rows("SELECT tag_id, version FROM #{versions_table} WHERE tag_id = #{first}")

        lookalike = format(Strata::Dependencies::KEY_FORMAT, first)
        assert tier.set(lookalike, "an entry")
        assert_equal "an entry", tier.get(lookalike)
        assert_equal({first => version}, tier.get_versions([first]), "a key shaped like a version key is an entry")

        assert tier.delete_versions([first])
        refute tier.delete_versions([first])
        assert_equal({}, tier.get_versions([first]))
        assert_raises(ArgumentError) { tier.set_version(first, "short") }
        assert_raises(ArgumentError) { tier.set_version(-1, version) }
        assert_raises(ArgumentError) { tier.get_versions(["bugs"]) }
        assert tier.clear
        assert_equal({}, tier.get_versions([second]), "clear empties the versions")
      end

      # Each change appends its row in order (a replace when it stored); fills and reads append
      # nothing.
      def test_the_log_names_each_change_and_no_fill
        tier = build_tier(invalidation_log: true)
        id = Strata::Dependencies.tag_id("bugs/42")
        start = tier.log_head
        tier.set("a", "1")
        tier.set_multi({"c" => "2", "b" => "3"})
        tier.delete("a")
        tier.set_version(id, [1].pack("Q<"))
        tier.delete_versions([id])
        tier.add("d", "4")
        _, token = tier.get_for_fill("e")
        tier.add_for_fill("e", "5", token)
        tier.add_version(id, [2].pack("Q<"))
        tier.get("a")
        tier.replace("c", "2", "6")
        tier.replace("c", "2", "7") # refused: not logged
        tier.clear

        rows = tier.log_after(start)
        multi = %w[b c].sort_by { |name| SQL.key_hash(name) }.map { |name| [nil, name] }
        assert_equal [[nil, "a"], *multi, [nil, "a"], [id, nil], [id, nil], [nil, "c"], [nil, nil]],
          rows.map { |_, tag_id, logged| [tag_id, logged&.b] }, "set_multi goes in key_hash order"
        ids = rows.map(&:first)
        assert_equal ids.sort, ids
        assert_equal ids.last, tier.log_head
        assert_equal rows.values_at(1, 4), tier.log_rows([ids[1], ids[4], ids.last + 100])
        assert_equal [], tier.log_after(ids.last)

        quiet = build_tier(invalidation_log: false)
        quiet.set("a", "1")
        quiet.delete("a")
        assert_equal ids.last, tier.log_head, "without the log, nothing"
      end

      # The log row is part of the change: a change whose row can't be appended is not made.
      def test_a_change_and_its_log_row_commit_together
        tier = build_tier(invalidation_log: true)
        tier.set("kept", "old")
        execute("DROP TABLE #{log_table}")
        assert_raises(Strata::TierError) { tier.set("kept", "new") }
        assert_raises(Strata::TierError) { tier.delete("kept") }
        assert_raises(Strata::TierError) { tier.set_version(1, [1].pack("Q<")) }
        assert_equal "old", tier.get("kept")
        assert_equal({}, tier.get_versions([1]))
      ensure
        SQL.create_table!(@tier.connection_class, table_name: table)
      end

      def test_the_expiry_pass_trims_old_log_rows_and_keeps_the_newest
        tier = build_tier(invalidation_log: true, log_retention: 60, expiry_batch_size: 10, expire_every: 1)
        old = Strata::Entry.now - 61_000
        execute("INSERT INTO #{log_table} (created_at, tag_id) VALUES #{(1..12).map { |i| "(#{old}, #{i})" }.join(", ")}")
        tier.set("a", "v") # one pass: the oldest ten
        assert_equal [11, 12], select_rows("SELECT tag_id FROM #{log_table} WHERE tag_id IS NOT NULL ORDER BY id").flatten.map(&:to_i)

        execute("DELETE FROM #{log_table}")
        execute("INSERT INTO #{log_table} (created_at, tag_id) VALUES (#{old}, 1)")
        tier.set("b", "v")
        assert_equal 2, count_log_rows, "the old row went; the pass ran before the write's row"
        execute("UPDATE #{log_table} SET created_at = #{old}")
        tier.set("c", "v")
        assert_equal 2, count_log_rows, "the newest of the old rows stays, with the new one"
      end

      private

      def versions_table
        SQL::Schema.versions_table(table)
      end

      def log_table
        SQL::Schema.log_table(table)
      end

      def count_log_rows
        select_values("SELECT COUNT(*) FROM #{log_table}").first.to_i
      end

      def select_rows(sql)
        @tier.connection_class.connection_pool.with_connection { |c| c.select_rows(sql) }.map { |row| row.map(&:to_i) }
      end

      # tier (on record's connection, with an expiry pass on every write, so that each write also
      # opens a transaction of its own) writes inside record's transactions: one committed, one
      # rolled back. Then the writes that stand.
      def writes_through_app_transactions(record, tier)
        record.transaction { tier.set("kept", "v") }
        record.transaction do
          tier.set("dropped", "v")
          tier.set_multi({"also dropped" => "v"})
          raise ActiveRecord::Rollback
        end
        ["kept", "dropped", "also dropped"].to_h { |key| [key, tier.get(key)] }
      end

      def table
        @tier.table_name
      end

      def execute(sql)
        @tier.connection_class.connection_pool.with_connection { |c| c.execute(sql) }
      end

      def select_values(sql)
        @tier.connection_class.connection_pool.with_connection { |c| c.select_values(sql) }
      end

      def count_rows(where = "1 = 1")
        select_values("SELECT COUNT(*) FROM #{table} WHERE #{where}").first.to_i
      end

      def total_bytes
        select_values("SELECT COALESCE(SUM(byte_size), 0) FROM #{table}").first.to_i
      end

      def row_ids
        select_values("SELECT id FROM #{table} ORDER BY id").map(&:to_i)
      end

      def expires_at_of(key)
        select_values("SELECT expires_at FROM #{table} WHERE key_hash = #{SQL.key_hash(key)}").first.to_i
      end

      # Inserts rows, in order (so ids ascend unless given). Each: key:, and optionally value:
      # ("v"), key_hash: (the key's), expires_at: (0), created_at: (now), id: (all rows or none;
      # without it the table numbers them).
      def insert_rows(rows)
        now = Strata::Entry.now
        ids = rows.first&.key?(:id)
        @tier.connection_class.connection_pool.with_connection do |c|
          values = rows.map do |row|
            key = row.fetch(:key).b
            value = row.fetch(:value, "v").b
            fields = [row.fetch(:key_hash) { SQL.key_hash(key) }, row.fetch(:expires_at, 0), row.fetch(:created_at, now),
              key.bytesize + value.bytesize]
            fields.unshift(Integer(row.fetch(:id))) if ids
            "(#{fields.join(", ")}, #{c.quote(binary(key))}, #{c.quote(binary(value))})"
          end
          columns = "#{"id, " if ids}key_hash, expires_at, created_at, byte_size, #{c.quote_column_name("key")}, value"
          values.each_slice(500) { |slice| c.execute("INSERT INTO #{table} (#{columns}) VALUES #{slice.join(", ")}") }
          # PostgreSQL's id sequence must move past ids given by hand, or the tier's next insert collides.
          if ids && c.adapter_name.match?(/postg/i)
            c.execute("SELECT setval(pg_get_serial_sequence('#{table}', 'id'), (SELECT MAX(id) FROM #{table}))")
          end
        end
      end

      def binary(bytes)
        ActiveModel::Type::Binary::Data.new(bytes)
      end
    end
  end
end
