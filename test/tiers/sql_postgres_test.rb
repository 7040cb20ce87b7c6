# frozen_string_literal: true

require "test_helper"
require "support/sql_server_tier"
require "support/postgres_cluster"

# Tiers::SQL on PostgreSQL through an Active Record class of the app's kind (connection_class:):
# the same contract as on SQLite, against the server bin/test starts (STRATA_POSTGRES_URL).
class SqlPostgresTierTest < Minitest::Test
  include Strata::TestSupport::SqlServerTier

  # Stands for the app's abstract class on its cache database.
  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def self.record
    @connected ||= Record.establish_connection(Strata::TestSupport::PostgresCluster.url)
    Record
  end

  def record
    self.class.record
  end

  # The waits on c's own locks: pg_locks and pg_blocking_pids are read live (pg_stat_activity
  # would be the snapshot this transaction took first). Only c's: another test run may share
  # the server, with waits of its own.
  def lock_waits(c, _table)
    c.select_value("SELECT COUNT(*) FROM pg_locks WHERE NOT granted AND pg_backend_pid() = ANY(pg_blocking_pids(pid))")
  end

  def test_the_table_has_postgresql_types
    columns = Record.connection_pool.with_connection { |c| c.columns(@table).to_h { |column| [column.name, column.sql_type] } }
    assert_equal({"id" => "bigint", "key_hash" => "bigint", "expires_at" => "bigint", "created_at" => "bigint",
                  "byte_size" => "integer", "key" => "bytea", "value" => "bytea"}, columns)
  end

  # A commit that appends to the log notifies its channel; a listener wakes then, not before.
  def test_a_commit_that_appends_to_the_log_wakes_a_listener
    listener = @tier.log_listener
    refute listener.wait(0), "nothing yet"
    record.transaction do
      @tier.set("k", "v")
      refute listener.wait(0), "not before the commit"
    end
    assert listener.wait(5)
    @tier.add("filled", "v")
    refute listener.wait(0), "a fill appends nothing"
    @tier.delete("k")
    @tier.delete("k")
    # A query on the listener's own connection: the server sends a session the notifications
    # committed before its transaction ends, so both are pending, not on their way, when the
    # wait below runs.
    listener.instance_variable_get(:@connection).exec("SELECT 1")
    assert listener.wait(5)
    refute listener.wait(0), "one wait takes every pending notification"
  ensure
    listener&.close
  end
end
