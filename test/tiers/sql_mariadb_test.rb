# frozen_string_literal: true

require "test_helper"
require "support/sql_server_tier"
require "support/mariadb_server"

# Tiers::SQL on MariaDB through an Active Record class of the app's kind (connection_class:, the
# trilogy adapter): the same contract as on SQLite and PostgreSQL, against the server bin/test
# starts (STRATA_MARIADB_URL). MySQL's own server is not tested here; the tier's MySQL statements
# use nothing MariaDB has and MySQL 8 lacks.
class SqlMariaDBTierTest < Minitest::Test
  include Strata::TestSupport::SqlServerTier

  # Stands for the app's abstract class on its cache database.
  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def self.record
    @connected ||= Record.establish_connection(Strata::TestSupport::MariaDBServer.url)
    Record
  end

  def record
    self.class.record
  end

  # By the statement's text: InnoDB's lock tables are a snapshot, refreshed only for a read 0.1 s
  # after the one before, so a quick read may still show the previous test's wait.
  def lock_waits(c, table)
    c.select_value("SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT' " \
      "AND trx_query LIKE #{c.quote("%#{table}%")}")
  end

  def lock_wait_poll
    0.2
  end

  def test_the_table_has_mysql_types
    columns = record.connection_pool.with_connection { |c| c.columns(@table).to_h { |column| [column.name, column.sql_type] } }
    assert_equal({"id" => "bigint(20)", "key_hash" => "bigint(20)", "expires_at" => "bigint(20)", "created_at" => "bigint(20)",
                  "byte_size" => "int(11)", "key" => "blob", "value" => "longblob"}, columns)
  end

  def test_a_value_of_a_mebibyte_is_stored_whole
    value = Random.new(7).bytes(1024 * 1024)
    assert @tier.set("large", value)
    assert_equal value, @tier.get("large")
  end

  def test_add_refuses_a_live_key_without_failing_the_apps_transaction
    @tier.set("taken", "1")
    record.transaction do
      refute @tier.add("taken", "2"), "the live row refuses the insert"
      assert @tier.add("free", "3")
    end
    assert_equal({"taken" => "1", "free" => "3"}, @tier.get_multi(["taken", "free"]))
  end
end
