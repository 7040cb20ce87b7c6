# frozen_string_literal: true

require "support/sql_tier_contract"
require "support/waiting"

module Strata
  module TestSupport
    # The SQL tier's contract on a database server, through an Active Record class of the app's
    # kind (connection_class:). The including class defines record: its abstract Active Record
    # class, connected to the server. Each test has a table of its own, made with
    # SQL.create_table! and dropped after. It also defines lock_waits(c, table): how many
    # statements wait for a row lock c holds on table (another test run may share the server).
    module SqlServerTier
      include SqlTierContract
      include Strata::Waiting

      def setup
        @table = "strata_test_#{SecureRandom.hex(6)}"
        SQL.create_table!(record, table_name: @table)
        @tiers = []
        @tier = build_tier
      end

      def teardown
        return unless @table

        @tiers.each(&:close)
        record.connection_pool.with_connection do |c|
          [@table, SQL::Schema.versions_table(@table), SQL::Schema.log_table(@table)].each { |name| c.drop_table(name, if_exists: true) }
          c.drop_table(@weight_table, if_exists: true) if @weight_table
        end
      end

      def id_of(key)
        select_values("SELECT id FROM #{table} WHERE key_hash = #{SQL.key_hash(key)}").first.to_i
      end

      # Locks the row with id on c until c's transaction ends: only its primary key (InnoDB locks
      # the key_hash index entries after the one a REPLACE finds, which a change would lock too).
      def lock_row(c, id)
        c.select_value("SELECT id FROM #{c.quote_table_name(@table)} WHERE id = #{Integer(id)} FOR UPDATE")
      end

      # A table for #outweigh_the_tier, dropped after the test. Made outside the transaction: on
      # MySQL a CREATE TABLE commits the open one.
      def weight_table(c)
        @weight_table = "#{@table}_weight"
        c.create_table(@weight_table) { |t| t.integer :n }
        @weight_table
      end

      # Makes c's transaction the heavier of two in a deadlock: InnoDB rolls back the one that has
      # changed fewer rows.
      def outweigh_the_tier(c, table)
        c.insert("INSERT INTO #{c.quote_table_name(table)} (n) VALUES #{(1..50).map { |n| "(#{n})" }.join(", ")}")
      end

      # Seconds between two reads of lock_waits.
      def lock_wait_poll
        0.01
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

      # Two writers that lock the same rows in opposite orders deadlock, and the database rolls
      # one back. Here the tier's set_multi is the victim: it writes first then second (key_hash
      # order), while the app holds second and then asks for first. The app's statement goes
      # through, and the tier's batch runs again once the app commits, and stores.
      #
      # PostgreSQL rolls back the backend whose deadlock_timeout (1 s) passes first with the
      # cycle there: the tier's, which waits first, unless the app's second request comes more
      # than that after the tier began to wait (this thread stalled on a loaded machine; InnoDB
      # chooses by weight instead). Then the app is the victim, which tests nothing here, and the
      # round runs again: at most DEADLOCK_ROUNDS.
      def test_a_batch_rolled_back_for_a_deadlock_runs_again
        @tier.set_multi({"a" => "old", "b" => "old"})
        first, second = ["a", "b"].sort_by { |key| SQL.key_hash(key) }
        weight = record.connection_pool.with_connection { |app| weight_table(app) }
        statements = reruns = nil
        tier_was_the_victim = DEADLOCK_ROUNDS.times.any? do
          statements = Queue.new
          reruns = @tier.stats[:deadlock_reruns]
          deadlock_round(first, second, weight, statements)
        end
        assert tier_was_the_victim, "in #{DEADLOCK_ROUNDS} rounds the database never chose the tier's batch"
        # Usually one rerun. Two when the rerun's first upsert took its row back before the app's
        # waiting lock was granted (the lock is not handed over in order): the cycle forms again.
        reran = @tier.stats[:deadlock_reruns] - reruns
        assert_includes 1..2, reran, "the round the tier lost ran again"
        assert_equal 2 + (2 * reran), statements.size, "two upserts, the second one the deadlock's victim, then both again per rerun"
        assert_equal({"a" => "new", "b" => "new"}, @tier.get_multi(["a", "b"]))
      end

      DEADLOCK_ROUNDS = 3

      # One round of the deadlock above: true when the tier's batch was the victim (and ran again
      # and stored), false when the app's statement was (its transaction rolled back; the batch
      # then stored without a rerun).
      def deadlock_round(first, second, weight, statements)
        counting = ->(*, payload) { statements << payload[:name] if payload[:name] == "Strata L3 set_multi" }
        writer = nil
        app_was_the_victim = false
        ActiveSupport::Notifications.subscribed(counting, "sql.active_record") do
          record.connection_pool.with_connection do |app|
            app.transaction do
              outweigh_the_tier(app, weight)
              lock_row(app, id_of(second))
              writer = Thread.new { @tier.set_multi({"a" => "new", "b" => "new"}) }
              # Soon after: PostgreSQL looks for a deadlock once, deadlock_timeout (1 s) into a wait.
              assert wait_until(DEADLINE, every: lock_wait_poll) { lock_waits(app, @table) > 0 }, "the tier waits for the row the app holds"
              begin
                lock_row(app, id_of(first)) # the cycle: the database rolls the tier back
              rescue ActiveRecord::Deadlocked
                app_was_the_victim = true
                raise ActiveRecord::Rollback
              end
            end
          end
          assert_equal({"a" => true, "b" => true}, writer.value, "the batch stored")
        end
        !app_was_the_victim
      ensure
        writer&.join
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
