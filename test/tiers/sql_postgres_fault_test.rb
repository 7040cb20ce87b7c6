# frozen_string_literal: true

require "test_helper"
require "support/postgres_cluster"
require "support/sql_server_fault"

# Tiers::SQL when its PostgreSQL server dies under it: on a throwaway cluster of the test's own
# (the shared server stays up), stopped as a crash would stop it, then started again.
class SqlPostgresFaultTest < Minitest::Test
  include Strata::TestSupport::SqlServerFault

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @server = Strata::TestSupport::PostgresCluster.new
    url = @server.start
    # connect_timeout bounds a connection attempt to a server that does not answer at all;
    # min_messages=error keeps the server's shutdown WARNING off the test output.
    Record.establish_connection("#{url}?connect_timeout=2&min_messages=error")
    Strata::Tiers::SQL.create_table!(Record)
    @tier = Strata::Tiers::SQL.new(connection_class: Record)
  end

  def teardown
    Record.remove_connection if @server
    @server&.destroy
  end

  def server_label
    "postgresql"
  end
end
