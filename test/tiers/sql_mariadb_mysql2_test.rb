# frozen_string_literal: true

require "test_helper"
require_relative "sql_mariadb_test"

# Every test of SqlMariaDBTierTest again, on the same server, through Active Record's other MySQL
# adapter, mysql2 (the C client library) instead of trilogy. The tier's statements and quoting are
# the same; what differs is the adapter: its error classes, type casts and statement paths.
class SqlMariaDBMysql2TierTest < SqlMariaDBTierTest
  # Stands for the app's abstract class on its cache database, through mysql2.
  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def self.record
    @connected ||= Record.establish_connection(Strata::TestSupport::MariaDBServer.url.sub(/\Atrilogy:/, "mysql2:"))
    Record
  end

  def test_the_connection_is_mysql2
    assert_equal "mysql2", record.connection_db_config.adapter
    assert_match(%r{Strata L3 mysql2:127\.0\.0\.1:\d+/strata_test }, @tier.inspect)
  end
end
