# frozen_string_literal: true

require "test_helper"
require "strata/tiers/sql"
require "support/postgres_cluster"
require "support/waiting"

# Tiers::SQL when its PostgreSQL server dies under it: on a throwaway cluster of the test's own
# (the shared server stays up), stopped as a crash would stop it, then started again.
class SqlPostgresFaultTest < Minitest::Test
  include Strata::Waiting

  # Seconds an operation may take to fail against a dead server, and to come back after a restart.
  BOUND = 10

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @cluster = Strata::TestSupport::PostgresCluster.new
    url = @cluster.start
    # connect_timeout bounds a connection attempt to a server that does not answer at all;
    # min_messages=error keeps the server's shutdown WARNING off the test output.
    Record.establish_connection("#{url}?connect_timeout=2&min_messages=error")
    Strata::Tiers::SQL.create_table!(Record)
    @tier = Strata::Tiers::SQL.new(connection_class: Record)
  end

  def teardown
    Record.remove_connection if @cluster
    @cluster&.destroy
  end

  def test_a_crashed_server_raises_tier_errors_and_keeps_what_was_committed
    keys = (1..20).map { |i| "committed-#{i}" }
    keys.each { |key| assert @tier.set(key, "value of #{key}") }

    @cluster.crash
    operations = {
      get: -> { @tier.get(keys.first) },
      get_multi: -> { @tier.get_multi(keys) },
      set: -> { @tier.set("during", "v") },
      add: -> { @tier.add("during", "v") },
      delete: -> { @tier.delete(keys.last) },
      cleanup: -> { @tier.cleanup }
    }
    operations.each do |name, operation|
      started = monotonic
      error = assert_raises(Strata::TierError, name) { operation.call }
      assert_operator monotonic - started, :<, BOUND, "#{name} failed within #{BOUND}s"
      assert_equal :l3, error.tier
      assert_match(/Strata L3 postgresql/, error.message)
    end

    @cluster.restart
    back = wait_until(BOUND) do
      @tier.get(keys.first)
    rescue Strata::TierError
      nil
    end
    assert_equal "value of #{keys.first}", back, "operations resume after the restart"
    assert_equal keys.to_h { |key| [key, "value of #{key}"] }, @tier.get_multi(keys), "every committed entry survived"
    assert_nil @tier.get("during"), "nothing was written while the server was down"
    assert @tier.set("after", "v")
    assert_equal "v", @tier.get("after")
  end

  private

  def monotonic
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end
end
