# frozen_string_literal: true

require "test_helper"
require "support/mariadb_server"
require "support/sql_server_fault"

# Tiers::SQL when its MariaDB server dies under it: on a throwaway server of the test's own (the
# shared one stays up), killed with SIGKILL, then started again on the same files.
class SqlMariaDBFaultTest < Minitest::Test
  include Strata::TestSupport::SqlServerFault

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @server = Strata::TestSupport::MariaDBServer.new
    url = @server.start
    # connect_timeout bounds a connection attempt to a server that does not answer at all (a
    # number: trilogy takes no String from the URL's query).
    Record.establish_connection(url: url, connect_timeout: 2)
    Strata::Tiers::SQL.create_table!(Record)
    @tier = Strata::Tiers::SQL.new(connection_class: Record)
  end

  def teardown
    Record.remove_connection if @server
    @server&.destroy
  end

  def server_label
    "trilogy"
  end
end
