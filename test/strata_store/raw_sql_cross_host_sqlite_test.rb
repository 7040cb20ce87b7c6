# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "strata/tiers/sql"
require "support/triggers_migration"
require "support/child_processes"

# P5 across hosts on SQLite: the strata:triggers migration on an SQLite file that two hosts
# (processes with L1 files of their own) share as their SQL tier, with the invalidation log; a
# raw UPDATE run by the sqlite3 shell. Its triggers append the tags as text, a host's poller
# turns them into versions and log rows, and every host's poller drops its copies: the entries
# tagged with the row's tags miss on both hosts.
class StrataStoreRawSqlCrossHostSQLiteTest < Strata::StoreCase
  include Strata::TestSupport::ChildProcesses

  # Seconds a host may take to see the change; seconds the child may take in all.
  BOUND = 10
  DEADLINE = 30
  # BugTag's strata_cascade :bug, as the generator writes it.
  CASCADES = {"bug_tags" => {"primary_key" => "id", "parents" => [{"column" => "bug_id", "table" => "bugs"}]}}.freeze

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @path = File.join(@tmpdir, "app.sqlite3")
    Record.establish_connection(adapter: "sqlite3", database: @path)
    Strata::Tiers::SQL.create_table!(Record)
    Record.connection_pool.with_connection do |c|
      c.execute("CREATE TABLE bugs (id INTEGER PRIMARY KEY, title TEXT)")
      c.execute("INSERT INTO bugs VALUES (42, 'crash'), (7, 'hang')")
      c.execute("CREATE TABLE bug_tags (id INTEGER PRIMARY KEY, bug_id INTEGER, name TEXT)")
      Strata::TestSupport::TriggersMigration.migrate_triggers(c, %w[bugs bug_tags], cascades: CASCADES)
    end
  end

  def teardown
    Record.remove_connection
  end

  def test_p5_a_raw_update_on_a_shared_sqlite_file_reaches_every_hosts_entries
    b = polling_host("b")
    b.fetch("bug/42", tags: ["bugs/42"]) { "crash" }
    b.fetch("bugs", tags: ["bugs"]) { "2 bugs" }
    b.fetch("bug/7", tags: ["bugs/7"]) { "hang" }
    ready_r, ready_w = IO.pipe
    go_r, go_w = IO.pipe
    pid = fork_child do
      ready_r.close
      go_w.close
      a = polling_host("a")
      a.fetch("bug/42", tags: ["bugs/42"]) { "crash" }
      ready_w.write((a.read("bug/42") == "crash") ? "y" : "n")
      ready_w.close
      go_r.read(1) # until the UPDATE ran
      wait_until(BOUND) { a.read("bug/42").nil? } && a.read("bug/42").nil?
    end
    ready_w.close
    go_r.close
    assert_equal "y", ready_r.read(1), "host A cached bug/42"

    assert system("sqlite3", "-bail", @path, "UPDATE bugs SET title = 'crash on start' WHERE id = 42", out: File::NULL)
    go_w.write("1")
    go_w.close

    assert wait_until(BOUND) { b.read("bug/42").nil? }, "the record's entry misses on host B"
    assert_nil b.read("bugs"), "and the collection's"
    assert_equal "hang", b.read("bug/7"), "another record's stays"
    status = reap(pid, DEADLINE) || kill_and_reap(pid, DEADLINE)
    assert status&.success?, "the record's entry misses on host A: #{status.inspect}"
  ensure
    [ready_r, ready_w, go_r, go_w].each { |io| io&.close unless io&.closed? }
  end

  # Finding 12 on SQLite: a raw change of a child row whose model declares strata_cascade :bug
  # reaches its bug's entries, and not another bug's.
  def test_p12_a_raw_insert_of_a_cascading_row_reaches_its_parents_entries
    b = polling_host("b")
    b.fetch("bug/42", tags: ["bugs/42"]) { "crash, no tags" }
    b.fetch("bug/7", tags: ["bugs/7"]) { "hang" }

    assert system("sqlite3", "-bail", @path, "INSERT INTO bug_tags VALUES (1, 42, 'ui')", out: File::NULL)
    assert wait_until(BOUND) { b.read("bug/42").nil? }, "the parent's entry misses"
    assert_equal "hang", b.read("bug/7"), "another bug's stays"
  end

  private

  # A store of the host called name, with its poller running: its own L1 file, the shared SQLite
  # file with the log. Tag versions stay a minute in L1, so only the poller makes it see a change.
  def polling_host(name)
    cache = ActiveSupport::Cache::StrataStore.new(namespace: @namespace ||= "raw-#{SecureRandom.hex(4)}",
      l1: {path: File.join(@tmpdir, "#{name}.l1"), size: Strata::StoreCase::TABLE_SIZE},
      sql: {path: @path, invalidation_log: true}, coherence_interval: 60)
    @stores << cache
    raise "host #{name}'s poller did not run" unless wait_until(BOUND) { cache.engine.poller.last_seen }

    cache
  end
end
