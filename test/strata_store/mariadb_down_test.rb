# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "strata/tiers/sql"
require "support/mariadb_server"
require_relative "database_down_cases"

# DatabaseDownCases on MariaDB: a server of the test's own, crashed (SIGKILL).
class StrataStoreMariaDBDownTest < Strata::StoreCase
  include DatabaseDownCases

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @server = Strata::TestSupport::MariaDBServer.new
    Record.establish_connection(url: @server.start, connect_timeout: 2, read_timeout: 2, write_timeout: 2)
    Strata::Tiers::SQL.create_table!(Record)
    @namespace = "mariadb-down-#{SecureRandom.hex(4)}"
  end

  def teardown
    Record.remove_connection
    @server.destroy
  end
end
