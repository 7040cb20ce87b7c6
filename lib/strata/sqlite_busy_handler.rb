# frozen_string_literal: true

require "strata/tiers/sql/embedded"

module Strata
  # Prepended to Active Record's SQLite3Adapter (7.1 and 7.2) by the Railtie: a connection with a
  # `timeout` waits for another connection's lock sleeping in Ruby (Tiers::SQL::Embedded
  # .wait_for_locks), as Rails 8.0 does, instead of in SQLite's busy_timeout, which waits holding
  # Ruby's GVL. With busy_timeout a thread waiting for the lock stops every thread of its
  # process, the lock's holder among them when it is in the same process (a Puma worker's
  # request in a transaction while another's cache write waits): neither moves until the wait
  # times out and fails with "database is locked". Strata's SQL tier in the app's SQLite database
  # (sql: {connection_class:}) adds such writers to every worker. Active Record's private
  # configure_connection (test/strata_store/rails_private_api_test.rb).
  module SQLiteBusyHandler
    private

    def configure_connection
      super
      timeout = @config[:timeout] && self.class.type_cast_config_to_integer(@config[:timeout])
      Tiers::SQL::Embedded.wait_for_locks(@raw_connection, timeout / 1000.0) if timeout
    end
  end
end
