# frozen_string_literal: true

require "test_helper"
require_relative "sql_mariadb_fault_test"

# SqlMariaDBFaultTest again through the mysql2 adapter: its errors for a dead server must become
# Strata::TierErrors as trilogy's do.
class SqlMariaDBMysql2FaultTest < SqlMariaDBFaultTest
  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def record
    Record
  end

  def connection_config(url)
    {url: url.sub(/\Atrilogy:/, "mysql2:"), connect_timeout: 2}
  end

  def server_label
    "mysql2"
  end
end
