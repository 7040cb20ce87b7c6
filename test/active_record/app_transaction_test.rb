# frozen_string_literal: true

require_relative "../strata_store/store_case"
require "securerandom"
require "strata/model"
require "strata/tiers/sql"
require "support/mariadb_server"
require_relative "app_transaction_cases"

# AppTransactionCases on an SQLite file the models and the SQL tier share (the embedded
# default's database as an app's), in the test's directory.
class StrataAppTransactionSQLiteTest < Strata::StoreCase
  include AppTransactionCases

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  class Bug < Record
    include Strata::Model
  end

  class CacheRecord < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    Record.establish_connection(cache_pool_config)
    Record.connection_pool.with_connection { |c| c.create_table(:bugs) { |t| t.string :title } }
    Strata::Tiers::SQL.create_table!(Record)
    Strata::Model.cache_store = build_store(sql: {connection_class: Record})
  end

  def teardown
    Strata::Model.cache_store = nil
    CacheRecord.remove_connection
    Record.remove_connection
    assert_nil Strata::TransactionTags.current
  end

  def cache_pool_config
    {adapter: "sqlite3", database: File.join(@tmpdir, "app.sqlite3")}
  end
end

# AppTransactionCases on MariaDB: the test's own tables in the shared database.
class StrataAppTransactionMariaDBTest < Strata::StoreCase
  include AppTransactionCases

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  class Bug < Record
    include Strata::Model
  end

  class CacheRecord < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @suffix = SecureRandom.hex(4)
    Bug.table_name = "bugs_#{@suffix}"
    Record.establish_connection(cache_pool_config)
    Record.connection_pool.with_connection { |c| c.create_table(Bug.table_name) { |t| t.string :title } }
    Strata::Tiers::SQL.create_table!(Record, **sql_options)
    Strata::Model.cache_store = build_store(sql: {connection_class: Record, **sql_options})
  end

  def teardown
    Strata::Model.cache_store = nil
    CacheRecord.remove_connection
    Record.connection_pool.with_connection do |c|
      table = sql_options[:table_name]
      [Bug.table_name, table, "#{table}_versions", "#{table}_log"].each { |name| c.drop_table(name, if_exists: true) }
    end
    Record.remove_connection
    assert_nil Strata::TransactionTags.current
  end

  def cache_pool_config
    Strata::TestSupport::MariaDBServer.url
  end

  def sql_options
    {table_name: "strata_#{@suffix}"}
  end
end
