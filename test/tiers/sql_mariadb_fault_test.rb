# frozen_string_literal: true

require "test_helper"
require "support/mariadb_server"
require "support/sql_server_fault"

# Tiers::SQL when its MariaDB server dies under it (SIGKILL), then starts again on the same files.
class SqlMariaDBFaultTest < Minitest::Test
  include Strata::TestSupport::SqlServerFault

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def record
    Record
  end

  def server
    Strata::TestSupport::MariaDBServer.new
  end

  # connect_timeout as a number: trilogy takes no String from the URL's query.
  def connection_config(url)
    {url: url, connect_timeout: 2}
  end

  def server_label
    "trilogy"
  end
end
