# frozen_string_literal: true

require_relative "store_case"
require "strata/tiers/sql"
require "support/cross_hosts"
require "support/mariadb_server"

# P2 and P4 over MariaDB (the server STRATA_MARIADB_URL names, a table of the test's own): the
# log alone, as MySQL has no notifications.
class StrataStoreCrossHostMariaDBTest < Strata::StoreCase
  include Strata::TestSupport::CrossHosts
  include Strata::TestSupport::CrossHosts::ServerTables

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def record_class
    Record
  end

  def server_url
    Strata::TestSupport::MariaDBServer.url
  end
end
