# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "strata/tiers/sql"
require "support/postgres_cluster"

# StrataStore over L1 and PostgreSQL when PostgreSQL dies mid-run (a throwaway cluster of the
# test's own, stopped as a crash would stop it): the app's requests never see an exception, reads
# fall back to L1 or miss, writes and deletes that did not reach PostgreSQL are reported and leave
# their keys missing (deleted there once it is back), and after the restart everything else
# committed before the crash is still there.
class StrataStorePostgresDownTest < Strata::StoreCase
  BOUND = 10 # seconds for operations to resume after the restart

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @cluster = Strata::TestSupport::PostgresCluster.new
    Record.establish_connection("#{@cluster.start}?connect_timeout=2&min_messages=error")
    Strata::Tiers::SQL.create_table!(Record)
    @namespace = "pg-down-#{SecureRandom.hex(4)}"
  end

  def teardown
    Record.remove_connection
    @cluster.destroy
  end

  def test_reads_fall_back_writes_are_reported_and_nothing_committed_is_lost
    cache = build_store(sql: {connection_class: Record}, namespace: @namespace)
    committed = (1..10).to_h { |i| ["committed-#{i}", "value #{i}"] }
    committed.each { |key, value| assert cache.write(key, value) }
    only_below = tier_key(cache, "committed-1")
    cache.stack[:l1].delete(only_below) # this one is in PostgreSQL alone

    @cluster.crash
    reports = capture_reports do
      assert_equal "value 2", cache.fetch("committed-2") { flunk "L1 still holds it" }
      assert_nil cache.read("committed-1"), "PostgreSQL is down and L1 never had it: a miss"
      # False, and the key misses everywhere: PostgreSQL still holds what the change replaced.
      refute cache.write("committed-3", "written while down")
      assert_nil cache.read("committed-3")
      refute cache.delete("committed-4")
      assert_nil cache.read("committed-4")
    end
    assert(reports.any? { |report| report[:context][:tier] == :l3 }, "the failed SQL writes and reads are reported")

    @cluster.restart
    resumed = wait_until(BOUND) do
      cache.write("after", "v") && cache.stack[:l3].get(tier_key(cache, "after"))
    rescue Strata::TierError
      nil
    end
    refute_nil resumed, "writes reach PostgreSQL again"
    missed = %w[committed-3 committed-4]
    assert wait_until(BOUND) { cache.stack[:l3].get_multi(missed.map { |key| tier_key(cache, key) }).empty? },
      "the write and the delete it missed are made deletes there (Strata::Retries)"
    missed.each { |key| assert_nil cache.read(key), "#{key}: not its value from before" }
    kept = committed.keys - missed
    assert_equal kept.size, cache.stack[:l3].get_multi(kept.map { |key| tier_key(cache, key) }).size, "every other committed entry survived"
    assert_equal "value 1", cache.read("committed-1"), "and is served again"
  end

  # An invalidate_tags that PostgreSQL (the versions' authority) missed returns false, and is
  # made again once it is back: the tag's version changes there, and what depended on it misses,
  # without another call.
  def test_an_invalidation_the_database_missed_is_made_once_it_is_back
    cache = build_store(sql: {connection_class: Record}, namespace: @namespace, coherence_interval: 0.2)
    cache.write("tagged", "old", tags: "bugs/1")
    key = cache.stack.dependencies.version_key(Strata::Dependencies.tag_id("bugs/1"))
    before = cache.stack[:l3].get(key)
    refute_nil before

    @cluster.crash
    reports = capture_reports { refute cache.invalidate_tags("bugs/1"), "not made: reported as such" }
    assert(reports.any? { |report| report[:context][:tier] == :l3 })

    @cluster.restart
    after = wait_until(BOUND) do
      cache.stack[:l3].get(key)
    rescue Strata::TierError
      nil
    end
    assert wait_until(BOUND) { cache.stack[:l3].get(key) != before }, "made again once PostgreSQL is back"
    refute_nil after
    assert_nil cache.read("tagged")
  end
end
