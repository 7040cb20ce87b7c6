# frozen_string_literal: true

require_relative "store_case"
require "strata/tiers/sql"
require "support/cross_hosts"
require "support/mariadb_server"

# P2 and P4 over MariaDB (the server STRATA_MARIADB_URL names, a table of the test's own): the
# log alone, as MySQL has no notifications.
class StrataStoreCrossHostMariaDBTest < Strata::StoreCase
  include Strata::TestSupport::CrossHosts

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @connected ||= Record.establish_connection(Strata::TestSupport::MariaDBServer.url)
    @table = "strata_hosts_#{SecureRandom.hex(6)}"
    Strata::Tiers::SQL.create_table!(Record, table_name: @table)
  end

  def teardown
    Record.connection_pool.with_connection do |c|
      [@table, "#{@table}_versions", "#{@table}_log"].each { |name| c.drop_table(name, if_exists: true) }
    end
  end

  def sql_options
    {connection_class: Record, table_name: @table}
  end
end
