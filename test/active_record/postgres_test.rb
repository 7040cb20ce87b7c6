# frozen_string_literal: true

require_relative "../strata_store/store_case"
require "securerandom"
require "strata/model"
require "strata/tiers/sql"
require "support/postgres_cluster"

# Strata::Model with PostgreSQL for the models and the SQL tier (the versions' authority), in a
# schema of the test's own on the shared server: commit invalidates, cascades, a rollback or a
# rolled back savepoint invalidates nothing (P7).
class StrataModelPostgresTest < Strata::StoreCase
  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  class Bug < Record
    include Strata::Model
  end

  class BugTag < Record
    include Strata::Model

    belongs_to :bug
    strata_cascade :bug
  end

  # The README's CacheRecord: the cache's connections in a pool of their own, on the same database.
  class CacheRecord < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @schema = "strata_model_#{SecureRandom.hex(4)}"
    url = Strata::TestSupport::PostgresCluster.url
    Record.establish_connection(url)
    Record.connection_pool.with_connection { |c| c.execute("CREATE SCHEMA #{@schema}") }
    Record.establish_connection("#{url}?schema_search_path=#{@schema}&min_messages=warning")
    Record.connection_pool.with_connection do |c|
      c.create_table(:bugs) { |t| t.string :title }
      c.create_table(:bug_tags) { |t| t.references :bug }
    end
    Strata::Tiers::SQL.create_table!(Record)
    @cache = build_store(sql: {connection_class: Record})
    Strata::Model.cache_store = @cache
  end

  def teardown
    CacheRecord.remove_connection
    Strata::Model.cache_store = nil
    Record.connection_pool.with_connection { |c| c.execute("DROP SCHEMA #{@schema} CASCADE") }
    Record.remove_connection
    assert_nil Strata::TransactionTags.current
  end

  def test_commit_invalidates_and_a_cascade_reaches_the_parent
    bug = Bug.create!(title: "old")
    @cache.fetch("bug", tags: bug.cache_tag) { "old" }

    BugTag.create!(bug: bug)
    assert_nil @cache.read("bug"), "a tag added to the bug"
    @cache.fetch("bug", tags: bug.cache_tag) { "tagged" }
    bug.update!(title: "new")
    assert_nil @cache.read("bug"), "the bug itself"
  end

  def test_p7_a_rollback_and_a_rolled_back_savepoint_invalidate_nothing
    bug = Bug.create!(title: "old")
    other = Bug.create!(title: "other")
    @cache.fetch("bug", tags: bug.cache_tag) { "old" }
    @cache.fetch("other", tags: other.cache_tag) { "other" }
    ids = [bug.cache_tag, other.cache_tag, Bug.cache_tag].map { |tag| Strata::Dependencies.tag_id(tag) }
    versions = @cache.stack.dependencies.versions(ids)

    Record.transaction do
      bug.update!(title: "new")
      BugTag.create!(bug: other)
      assert_nil @cache.read("bug"), "bypassed inside"
      raise ActiveRecord::Rollback
    end
    assert_equal versions, @cache.stack.dependencies.versions(ids), "no version changed"
    assert_equal "old", @cache.read("bug")
    assert_equal "other", @cache.read("other")

    Record.transaction do
      bug.update!(title: "new")
      Record.transaction(requires_new: true) do
        other.update!(title: "gone")
        raise ActiveRecord::Rollback
      end
    end
    assert_nil @cache.read("bug"), "the outer change committed"
    assert_equal "other", @cache.read("other"), "the rolled back savepoint's did not"
  end

  # A direct invalidate_tags inside the app's transaction, with the cache on a pool of its own:
  # the bump waits for the data's commit. Bumped at once, it would commit before the data, and a
  # reader on another connection would refill from the old row under the new version, for good.
  def test_invalidate_tags_inside_the_apps_transaction_bumps_when_the_data_commits
    cache = cache_on_a_pool_of_its_own
    bug = Bug.create!(title: "old")
    tag = bug.cache_tag
    title = -> { Record.connection_pool.with_connection { Bug.find(bug.id).title } }
    assert_equal "old", cache.fetch("bug", tags: tag) { title.call }
    before = cache.stack.dependencies.versions([Strata::Dependencies.tag_id(tag)])

    Record.transaction do
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

    Record.transaction do
      cache.invalidate_tags("bugs/1")
      raise ActiveRecord::Rollback
    end
    Record.transaction do
      cache.invalidate_tags("bugs/1")
      Record.transaction(requires_new: true) do
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

    Record.transaction do
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

  # A store of its own L1 file over memcached and the SQL tier on the models' connection, its
  # poller running.
  def host_on_the_apps_connection(name)
    cache = ActiveSupport::Cache::StrataStore.new(namespace: "rollback-#{@schema}",
      l1: {path: File.join(@tmpdir, "#{name}.l1"), size: TABLE_SIZE},
      memcached: {servers: Strata::TestSupport.memcached_servers}, sql: {connection_class: Record})
    @stores << cache
    assert wait_until(10) { cache.instance_variable_get(:@poller).last_seen }
    cache
  end

  def cache_on_a_pool_of_its_own
    CacheRecord.establish_connection(Record.connection_db_config.configuration_hash)
    build_store(sql: {connection_class: CacheRecord})
  end
end
