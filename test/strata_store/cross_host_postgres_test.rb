# frozen_string_literal: true

require_relative "store_case"
require "strata/tiers/sql"
require "support/cross_hosts"
require "support/postgres_cluster"

# P2 and P4 over PostgreSQL (the server STRATA_POSTGRES_URL names, a table of the test's own),
# with the poller woken by NOTIFY and with NOTIFY off; and the gap that commits out of id order
# leave in the log, driven step by step.
module CrossHostPostgres
  include Strata::TestSupport::CrossHosts::ServerTables

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def record_class
    Record
  end

  def server_url
    Strata::TestSupport::PostgresCluster.url
  end
end

# Only NOTIFY can wake these pollers in time: they poll once a minute.
class StrataStoreCrossHostNotifyTest < Strata::StoreCase
  include Strata::TestSupport::CrossHosts
  include CrossHostPostgres

  def store_options
    {poll_interval: 60}
  end
end

# NOTIFY dropped: the log alone, every poll_interval.
class StrataStoreCrossHostPollTest < Strata::StoreCase
  include Strata::TestSupport::CrossHosts
  include CrossHostPostgres

  def store_options
    {poll_listen: false}
  end

  # Two transactions take log ids in one order and commit in the other: the poller reads the
  # later id first, keeps the earlier one as a gap, and applies it once it commits.
  def test_a_row_that_commits_after_a_higher_id_was_read_is_applied
    l1 = Strata::Tiers::SharedMemory.new(path: File.join(@tmpdir, "gap.l1"), size: TABLE_SIZE)
    sql = Strata::Tiers::SQL.new(**sql_options)
    @stores << l1
    stack = Strata::Stack.new({l1: l1, l3: sql})
    poller = Strata::Poller.new(l1, sql, stack.dependencies, on_error: ->(error, _) { raise error }, interval: 1, listen: false,
      gap_timeout: 60)
    poller.round # the first round: no state yet, so it clears L1 and starts from the log's head
    %w[x y].each { |key| l1.set(key, "old") }

    first, second = Array.new(2) { PG.connect(Strata::TestSupport::PostgresCluster.url) }
    [first, second].each { |c| c.exec("BEGIN") }
    x = append(first, "x")
    y = append(second, "y")
    assert_operator x, :<, y
    second.exec("COMMIT")

    poller.round
    assert_nil l1.get("y"), "the committed row is applied"
    assert_equal "old", l1.get("x"), "the open one is not there yet"
    assert_equal y, poller.last_seen
    assert_includes gaps(l1), x

    first.exec("COMMIT")
    poller.round
    assert_nil l1.get("x"), "the gap, read again, is applied"
    assert_empty gaps(l1)
  ensure
    [first, second].each { |c| c&.close }
  end

  private

  # Appends a key row to the log on connection c, in its open transaction: its id.
  def append(c, key)
    c.exec_params("INSERT INTO #{c.quote_ident("#{@table}_log")} (created_at, key) VALUES ($1, $2) RETURNING id",
      [Strata::Entry.now, {value: key, format: 1}]).getvalue(0, 0).to_i
  end

  # The gap ids in the poller's state.
  def gaps(l1)
    l1.get(Strata::Poller::STATE_KEY).unpack("q<*").drop(2).each_slice(2).map(&:first)
  end
end
