# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "strata/tiers/sql"
require "support/postgres_cluster"
require_relative "database_down_cases"

# DatabaseDownCases on PostgreSQL: a cluster of the test's own, crashed (pg_ctl -m immediate).
class StrataStorePostgresDownTest < Strata::StoreCase
  include DatabaseDownCases

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @server = Strata::TestSupport::PostgresCluster.new
    Record.establish_connection("#{@server.start}?connect_timeout=2&min_messages=error")
    Strata::Tiers::SQL.create_table!(Record)
    @namespace = "pg-down-#{SecureRandom.hex(4)}"
  end

  def teardown
    Record.remove_connection
    @server.destroy
  end
end
