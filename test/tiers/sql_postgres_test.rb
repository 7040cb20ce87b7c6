# frozen_string_literal: true

require "test_helper"
require "support/sql_tier_contract"
require "support/postgres_cluster"

# Tiers::SQL on PostgreSQL through an Active Record class of the app's kind (connection_class:):
# the same contract as on SQLite, against the server bin/test starts (STRATA_POSTGRES_URL). Each
# test has a table of its own, made with SQL.create_table! and dropped after.
class SqlPostgresTierTest < Minitest::Test
  include Strata::TestSupport::SqlTierContract

  # Stands for the app's abstract class on its cache database.
  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def self.connect
    @connected ||= Record.establish_connection(Strata::TestSupport::PostgresCluster.url)
  end

  def setup
    self.class.connect
    @table = "strata_test_#{SecureRandom.hex(6)}"
    SQL.create_table!(Record, table_name: @table)
    @tiers = []
    @tier = build_tier
  end

  def teardown
    return unless @table

    @tiers.each(&:close)
    Record.connection_pool.with_connection { |c| c.drop_table(@table, if_exists: true) }
  end

  def build_tier(**options)
    tier = SQL.new(connection_class: Record, table_name: @table, **options)
    @tiers << tier
    tier
  end

  def test_the_table_has_postgresql_types
    columns = Record.connection_pool.with_connection { |c| c.columns(@table).to_h { |column| [column.name, column.sql_type] } }
    assert_equal({"id" => "bigint", "key_hash" => "bigint", "expires_at" => "bigint", "created_at" => "bigint",
                  "byte_size" => "integer", "key" => "bytea", "value" => "bytea"}, columns)
  end

  def test_writes_inside_an_app_transaction_commit_or_roll_back_with_it
    written = writes_through_app_transactions(Record, build_tier(expire_every: 1))
    assert_equal({"kept" => "v", "dropped" => nil, "also dropped" => nil}, written)
  end

  # A tier statement that fails inside the app's transaction (here, on a table that isn't there)
  # raises a TierError, which the stack absorbs, and leaves the app's transaction usable.
  def test_a_failing_statement_leaves_the_apps_transaction_usable
    broken = SQL.new(connection_class: Record, table_name: "strata_missing_#{SecureRandom.hex(4)}")
    Record.transaction do
      @tier.set("in the app's transaction", "v")
      assert_raises(Strata::TierError) { broken.get("k") }
      assert_equal 1, Record.connection.select_value("SELECT 1"), "the app's next statement runs"
    end
    assert_equal "v", @tier.get("in the app's transaction"), "and its transaction commits"
  end

  def test_close_leaves_the_apps_pool_alone
    @tier.close
    assert_predicate @tier, :closed?
    assert_raises(Strata::TierError) { @tier.get("k") }
    other = build_tier
    assert other.set("k", "v"), "the class's pool still works"
  end
end
