# frozen_string_literal: true

# Coherence inside the app's transactions (docs/coherence.md, "The ordering rule", 5; issue 34,
# findings 2-4), for each database the app and the SQL tier may share. The including StoreCase
# defines the constants Record (the models' abstract class, connected, with a bugs table), Bug
# (a Strata::Model on it) and CacheRecord (an abstract class for a pool of the cache's own), and
# #cache_pool_config (what CacheRecord connects with: the same database) and #sql_options (the
# SQL tier's options besides connection_class:).
module AppTransactionCases
  # A direct invalidate_tags inside the app's transaction, with the cache on a pool of its own:
  # the bump waits for the data's commit. Bumped at once, it would commit before the data, and a
  # reader on another connection would refill from the old row under the new version, for good.
  def test_invalidate_tags_inside_the_apps_transaction_bumps_when_the_data_commits
    cache = cache_on_a_pool_of_its_own
    bug = bug_class.create!(title: "old")
    tag = bug.cache_tag
    title = -> { record.connection_pool.with_connection { bug_class.find(bug.id).title } }
    assert_equal "old", cache.fetch("bug", tags: tag) { title.call }
    before = cache.stack.dependencies.versions([Strata::Dependencies.tag_id(tag)])

    record.transaction do
      bug.update_columns(title: "new") # no callbacks: what an app that invalidates by hand does
      assert cache.invalidate_tags(tag)
      assert_equal before, cache.stack.dependencies.versions([Strata::Dependencies.tag_id(tag)]), "nothing bumped yet"
      assert_nil cache.read("bug"), "this thread does not serve what depends on the tag"
      refilled = Thread.new { cache.fetch("bug", tags: tag, force: true) { title.call } }.value
      assert_equal "old", refilled, "another connection reads the committed row"
    end

    refute_equal before, cache.stack.dependencies.versions([Strata::Dependencies.tag_id(tag)]), "bumped at the commit"
    assert_nil cache.read("bug"), "the refill from the old row misses"
    assert_equal "new", cache.fetch("bug", tags: tag) { title.call }
    assert_nil Strata::TransactionTags.current
  end

  def test_invalidate_tags_inside_a_transaction_that_rolls_back_bumps_nothing
    cache = cache_on_a_pool_of_its_own
    ids = %w[bugs/1 bugs/2].map { |tag| Strata::Dependencies.tag_id(tag) }
    cache.write("one", "kept", tags: "bugs/1")
    cache.write("two", "kept", tags: "bugs/2")
    before = cache.stack.dependencies.versions(ids)

    record.transaction do
      cache.invalidate_tags("bugs/1")
      raise ActiveRecord::Rollback
    end
    record.transaction do
      cache.invalidate_tags("bugs/1")
      record.transaction(requires_new: true) do
        cache.invalidate_tags("bugs/2")
        raise ActiveRecord::Rollback
      end
    end

    after = cache.stack.dependencies.versions(ids)
    refute_equal before[0], after[0], "the committed transaction's bump"
    assert_equal before[1], after[1], "not the rolled back savepoint's"
    assert_equal "kept", cache.read("two")
  end

  # A cache write and delete inside a transaction that rolls back, the cache on the app's
  # connection: the SQL rows roll back with it, and what the tiers above took (this host's L1,
  # memcached, and another host's L1 that copied from memcached meanwhile) is taken back.
  def test_a_write_and_a_delete_in_a_transaction_that_rolls_back_are_taken_back_from_every_tier
    a = host_on_the_apps_connection("a")
    b = host_on_the_apps_connection("b")
    a.write("written", "old")
    a.write("deleted", "here")
    assert_equal ["old", "here"], [b.read("written"), b.read("deleted")]

    record.transaction do
      a.write("written", "new")
      a.delete("deleted")
      b.stack[:l1].delete(tier_key(b, "written"))
      assert_equal "new", b.read("written"), "B's L1 copies the uncommitted value from memcached"
      raise ActiveRecord::Rollback
    end

    assert_equal ["old", "here"], [a.read("written"), a.read("deleted")], "the writing host"
    assert wait_until(10) { b.read("written") == "old" }, "the other host, through its poller"
    assert_equal "here", b.read("deleted")
    assert_nil Strata::TransactionTags.current
  end

  private

  def record
    self.class::Record
  end

  def bug_class
    self.class::Bug
  end

  def sql_options
    {}
  end

  # A store of its own L1 file over memcached and the SQL tier on the models' connection, its
  # poller running.
  def host_on_the_apps_connection(name)
    cache = ActiveSupport::Cache::StrataStore.new(namespace: "rollback-#{@tmpdir.hash}",
      l1: {path: File.join(@tmpdir, "#{name}.l1"), size: Strata::StoreCase::TABLE_SIZE},
      memcached: {servers: Strata::TestSupport.memcached_servers}, sql: {connection_class: record, **sql_options})
    @stores << cache
    assert wait_until(10) { cache.engine.poller.last_seen }
    cache
  end

  def cache_on_a_pool_of_its_own
    self.class::CacheRecord.establish_connection(cache_pool_config)
    build_store(sql: {connection_class: self.class::CacheRecord, **sql_options})
  end
end
