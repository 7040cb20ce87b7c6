# frozen_string_literal: true

require_relative "store_case"
require "pg"
require "securerandom"
require "strata/tiers/sql"
require "support/triggers_migration"
require "support/postgres_cluster"

# P5 across hosts: the strata:triggers migration on PostgreSQL, a raw UPDATE from a plain
# connection (psql, another program), and a store on another host whose L1 holds an entry
# tagged with the row's tag: its poller reads the trigger's log row and the entry misses. In a
# schema of the test's own on the shared server.
class StrataStoreRawSqlCrossHostTest < Strata::StoreCase
  BOUND = 10
  # BugTag's strata_cascade :bug, as the generator writes it.
  CASCADES = {"bug_tags" => {"primary_key" => "id", "parents" => [{"column" => "bug_id", "table" => "bugs"}]}}.freeze

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @schema = "strata_raw_#{SecureRandom.hex(4)}"
    url = Strata::TestSupport::PostgresCluster.url
    Record.establish_connection(url)
    Record.connection_pool.with_connection { |c| c.execute("CREATE SCHEMA #{@schema}") }
    Record.establish_connection("#{url}?schema_search_path=#{@schema}&min_messages=warning")
    Strata::Tiers::SQL.create_table!(Record)
    Record.connection_pool.with_connection do |c|
      c.execute("CREATE TABLE bugs (id bigint PRIMARY KEY, title text)")
      c.execute("INSERT INTO bugs VALUES (42, 'crash')")
      c.execute("CREATE TABLE bug_tags (id bigint PRIMARY KEY, bug_id bigint, name text)")
      Strata::TestSupport::TriggersMigration.migrate_triggers(c, %w[bugs bug_tags], cascades: CASCADES)
    end
  end

  def teardown
    Record.connection_pool.with_connection { |c| c.execute("DROP SCHEMA #{@schema} CASCADE") }
    Record.remove_connection
  end

  def test_p5_a_raw_update_reaches_another_hosts_cached_entry
    cache = build_store(sql: {connection_class: Record}, coherence_interval: 60)
    poller = cache.engine.poller
    # Until its first round the state is FRESH (-1), which is truthy: wait for a place in the log.
    assert wait_until(BOUND) { (poller.last_seen || Strata::Poller::FRESH) > Strata::Poller::FRESH }
    cache.fetch("bug/42", tags: ["bugs/42"]) { "crash" }
    cache.fetch("bugs", tags: ["bugs"]) { "1 bug" }
    assert_equal "crash", cache.read("bug/42")

    connection = PG.connect(Strata::TestSupport::PostgresCluster.url)
    connection.exec("UPDATE #{@schema}.bugs SET title = 'crash on start' WHERE id = 42")
    assert wait_until(BOUND) { cache.read("bug/42").nil? }, "the record's entry"
    assert_nil cache.read("bugs"), "and the collection's"
  ensure
    connection&.close
  end

  # Finding 12: a raw change of a child row whose model declares strata_cascade :bug reaches
  # the entries of its bug, as the model's change would.
  def test_p12_a_raw_insert_of_a_cascading_row_reaches_its_parents_entries
    cache = build_store(sql: {connection_class: Record}, coherence_interval: 60)
    poller = cache.engine.poller
    assert wait_until(BOUND) { (poller.last_seen || Strata::Poller::FRESH) > Strata::Poller::FRESH }
    cache.fetch("bug/42", tags: ["bugs/42"]) { "crash, no tags" }
    cache.fetch("bugs", tags: ["bugs"]) { "1 bug" }

    connection = PG.connect(Strata::TestSupport::PostgresCluster.url)
    connection.exec("INSERT INTO #{@schema}.bug_tags VALUES (1, 42, 'ui')")
    assert wait_until(BOUND) { cache.read("bug/42").nil? }, "the parent's entry"
    assert_nil cache.read("bugs"), "and its collection's"
  ensure
    connection&.close
  end
end
