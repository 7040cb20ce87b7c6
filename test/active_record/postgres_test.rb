# frozen_string_literal: true

require_relative "../strata_store/store_case"
require "securerandom"
require "strata/model"
require "strata/tiers/sql"
require "support/postgres_cluster"
require_relative "app_transaction_cases"

# Strata::Model with PostgreSQL for the models and the SQL tier (the versions' authority), in a
# schema of the test's own on the shared server: commit invalidates, cascades, a rollback or a
# rolled back savepoint invalidates nothing (P7); and the cases of AppTransactionCases.
class StrataModelPostgresTest < Strata::StoreCase
  include AppTransactionCases

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
    @schema = Strata::TestSupport::PostgresCluster.connect_to_new_schema(Record, "strata_model")
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
    Strata::TestSupport::PostgresCluster.drop_schema(Record, @schema)
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

  def cache_pool_config
    Record.connection_db_config.configuration_hash
  end
end
