# frozen_string_literal: true

require_relative "store_case"
require "strata/tiers/sql"

# A store over the app's database made while the app boots: Rails builds the cache store before
# Active Record connects, so its poller's first rounds find no connection pool. They report
# nothing, and once the app connects the poller reads the log.
class StrataStorePollerBootTest < Strata::StoreCase
  class BootRecord < ActiveRecord::Base
    self.abstract_class = true
  end

  # Makes the cache tables in the app's database file before the app connects to it, so that
  # the poller never meets a connection without them.
  class SetupRecord < ActiveRecord::Base
    self.abstract_class = true
  end

  def teardown
    BootRecord.remove_connection
    SetupRecord.remove_connection
  end

  def test_a_store_made_before_the_app_connects_reports_nothing_and_polls_once_connected
    reports = capture_reports do
      store = build_store(sql: {connection_class: BootRecord}, poll_interval: 0.01)
      poller = store.engine.poller
      assert_raises(Strata::Error, ActiveRecord::ConnectionNotEstablished) { poller.round }

      database = {adapter: "sqlite3", database: File.join(@tmpdir, "app.sqlite3")}
      SetupRecord.establish_connection(database)
      Strata::Tiers::SQL.create_table!(SetupRecord)
      BootRecord.establish_connection(database)
      # Until its first round the state is FRESH (-1), which is truthy: wait for a place in the log.
      assert wait_until { (poller.last_seen || Strata::Poller::FRESH) > Strata::Poller::FRESH },
        "the poller reads the log once the app has connected"
    end

    assert_empty reports.map { |report| [report[:error].class, report[:context]] }
  end
end
