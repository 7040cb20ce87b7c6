# frozen_string_literal: true

require "support/sql_tier_contract"

module Strata
  module TestSupport
    # The SQL tier's contract on a database server, through an Active Record class of the app's
    # kind (connection_class:). The including class defines record: its abstract Active Record
    # class, connected to the server. Each test has a table of its own, made with
    # SQL.create_table! and dropped after.
    module SqlServerTier
      include SqlTierContract

      def setup
        @table = "strata_test_#{SecureRandom.hex(6)}"
        SQL.create_table!(record, table_name: @table)
        @tiers = []
        @tier = build_tier
      end

      def teardown
        return unless @table

        @tiers.each(&:close)
        record.connection_pool.with_connection { |c| c.drop_table(@table, if_exists: true) }
      end

      def build_tier(**options)
        tier = SQL.new(connection_class: record, table_name: @table, **options)
        @tiers << tier
        tier
      end

      def test_writes_inside_an_app_transaction_commit_or_roll_back_with_it
        written = writes_through_app_transactions(record, build_tier(expire_every: 1))
        assert_equal({"kept" => "v", "dropped" => nil, "also dropped" => nil}, written)
      end

      # A tier statement that fails inside the app's transaction (here, on a table that isn't
      # there) raises a TierError, which the stack absorbs, and leaves the app's transaction
      # usable (PostgreSQL refuses every statement of a transaction after its first error).
      def test_a_failing_statement_leaves_the_apps_transaction_usable
        broken = SQL.new(connection_class: record, table_name: "strata_missing_#{SecureRandom.hex(4)}")
        record.transaction do
          @tier.set("in the app's transaction", "v")
          assert_raises(Strata::TierError) { broken.get("k") }
          assert_equal 1, record.connection_pool.with_connection { |c| c.select_value("SELECT 1") }, "the app's next statement runs"
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
  end
end
