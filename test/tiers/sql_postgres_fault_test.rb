# frozen_string_literal: true

require "test_helper"
require "support/postgres_cluster"
require "support/sql_server_fault"

# Tiers::SQL when its PostgreSQL server dies under it (pg_ctl -m immediate), then starts again.
class SqlPostgresFaultTest < Minitest::Test
  include Strata::TestSupport::SqlServerFault

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def record
    Record
  end

  def server
    Strata::TestSupport::PostgresCluster.new
  end

  # connect_timeout bounds a connection attempt to a server that does not answer at all;
  # min_messages=error keeps the server's shutdown WARNING off the test output.
  def connection_config(url)
    "#{url}?connect_timeout=2&min_messages=error"
  end

  def server_label
    "postgresql"
  end
end
