# frozen_string_literal: true

require "test_helper"
require "json"
require "open3"
require "rbconfig"
require "securerandom"
require "yaml"
require "active_support"
require "active_support/cache/strata_store"
require "strata/tiers/sql"
require "support/postgres_cluster"

# exe/strata stats on an SQL tier named by a database URL (PostgreSQL, the server bin/test
# starts): the rows, invalidation log and tag versions that a store wrote through the app's
# connection class.
class StatsCommandPostgresTest < Minitest::Test
  include Strata::TestSupport

  ROOT = File.expand_path("../..", __dir__)
  EXE = File.join(ROOT, "exe", "strata")

  # Stands for the app's abstract class on its cache database.
  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @connected ||= Record.establish_connection(PostgresCluster.url)
    @table = "strata_stats_#{SecureRandom.hex(6)}"
    Strata::Tiers::SQL.create_table!(Record, table_name: @table)
    @dir = private_tmpdir
    @store = ActiveSupport::Cache::StrataStore.new(sql: {connection_class: Record, table_name: @table})
  end

  def teardown
    @store&.close
    Record.connection_pool.with_connection do |c|
      [@table, "#{@table}_versions", "#{@table}_log"].each { |name| c.drop_table(name, if_exists: true) }
    end
    FileUtils.remove_entry(@dir) if @dir && File.exist?(@dir)
  end

  def test_a_database_url_shows_rows_log_and_versions
    3.times { |i| @store.write("pg-#{i}", "value #{i}") }
    @store.delete("pg-2")
    @store.invalidate_tags("posts")
    config = File.join(@dir, "store.yml")
    File.write(config, YAML.dump({"sql" => {"url" => PostgresCluster.url, "table_name" => @table}}))

    out, err, status = Open3.capture3(RbConfig.ruby, "-rbundler/setup", "-I", File.join(ROOT, "lib"), EXE,
      "stats", "--json", "--config", config)

    assert status.success?, err
    sql = JSON.parse(out, symbolize_names: true)[:sql]
    assert_equal [3, 1, 1], sql.values_at(:rows, :tombstones, :versions_rows)
    assert_equal [count("#{@table}_log"), max_id("#{@table}_log")], sql.values_at(:log_rows, :log_head)
    assert_operator sql[:log_rows], :>, 0, "a tier on the app's connection class writes the invalidation log"
    refute_includes sql[:source], "strata@", "the URL's user is not printed"
  end

  private

  def count(table)
    Record.connection_pool.with_connection { |c| c.select_value("SELECT COUNT(*) FROM #{c.quote_table_name(table)}").to_i }
  end

  def max_id(table)
    Record.connection_pool.with_connection { |c| c.select_value("SELECT COALESCE(MAX(id), 0) FROM #{c.quote_table_name(table)}").to_i }
  end
end
