# frozen_string_literal: true

require_relative "cascade_property_test"
require "securerandom"
require "strata/tiers/sql"
require "support/postgres_cluster"

# P6 on PostgreSQL: the random graphs' models, and the SQL tier under L1 that holds the tag
# versions, in a schema of the test's own on the shared server.
class StrataCascadePropertyPostgresTest < StrataCascadePropertyTest
  # Fewer than on SQLite: each graph's tables are made and dropped on the server.
  GRAPHS = 2
  STEPS = 15

  def connect_models
    @schema = Strata::TestSupport::PostgresCluster.connect_to_new_schema(Record, "strata_p6")
    Strata::Tiers::SQL.create_table!(Record)
  end

  # The store (and its poller) goes before its schema.
  def disconnect_models
    @store&.close
    Record.connection_pool.with_connection { |c| c.execute("DROP SCHEMA #{@schema} CASCADE") }
    super
  end

  def store
    @store ||= build_store(sql: {connection_class: Record})
  end
end
