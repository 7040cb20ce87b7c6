# frozen_string_literal: true

require "securerandom"

module Strata
  # A store on a layout's tiers, for the tests of what a fetch answers around an entry's expiry
  # (race_condition_ttl, stale_while_revalidate:, fail_safe:, soft invalidation), which walk
  # their LAYOUTS: the test's table, memcached, and one SQLite file per test, under a namespace
  # of the test's own (memcached outlives it). Include in a StoreCase.
  module LayoutStores
    # The four layouts of issue 38: L1 alone, L1 + SQLite, memcached alone, all three.
    LAYOUTS = {
      l1: %i[l1],
      l1_sql: %i[l1 sql],
      memcached: %i[memcached],
      l1_memcached_sql: %i[l1 memcached sql]
    }.freeze

    def layout_store(tiers, l1_path: table_path, logger: nil, **options)
      options[:namespace] = @namespace ||= "layout-#{SecureRandom.hex(6)}"
      options[:l1] = {path: l1_path, size: StoreCase::TABLE_SIZE} if tiers.include?(:l1)
      options[:memcached] = {servers: TestSupport.memcached_servers, timeout: 2} if tiers.include?(:memcached)
      options[:sql] = {path: File.join(@tmpdir, "l3.sqlite3")} if tiers.include?(:sql)
      cache = ActiveSupport::Cache::StrataStore.new(**options)
      cache.logger = logger
      @stores << cache
      cache
    end
  end
end
