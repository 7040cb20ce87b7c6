# frozen_string_literal: true

require_relative "store_case"
require "strata/tiers/sql"
require "support/cross_hosts"

# P2 over an SQLite file that the hosts share, with the invalidation log on (on an embedded file
# it is off unless asked: one host's file has no other hosts).
class StrataStoreCrossHostTest < Strata::StoreCase
  include Strata::TestSupport::CrossHosts

  def sql_options
    {path: File.join(@tmpdir, "shared.sqlite3"), invalidation_log: true}
  end
end
