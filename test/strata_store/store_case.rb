# frozen_string_literal: true

require "test_helper"
require "active_support/cache/strata_store"
require "active_support/testing/time_helpers"
require "active_support/core_ext/integer/time"
require "active_support/core_ext/numeric/time"
require "support/locked_shard"
require "support/waiting"

module Strata
  # Base class of the StrataStore tests: each test gets a private directory and a fresh table in it.
  class StoreCase < Minitest::Test
    include ActiveSupport::Testing::TimeHelpers
    include LockedShard
    include Waiting

    TABLE_SIZE = 8 * 1024 * 1024

    # Each test on a tmpdir of its own. The cache logger is one for every store (Rails' class
    # attribute, which store.logger= sets): a test that sets it must not leave it to the next.
    def run
      logger = ActiveSupport::Cache::Store.logger
      TestSupport.with_tmpdir do |dir|
        @tmpdir = dir
        @stores = []
        super
      ensure
        @stores.each(&:close)
        ActiveSupport::Cache::Store.logger = logger
      end
    end

    # A store on this test's table; options go to StrataStore.new.
    def build_store(l1: {}, **options)
      store = ActiveSupport::Cache::StrataStore.new(l1: {path: table_path, size: TABLE_SIZE}.merge(l1), **options)
      @stores << store
      store
    end

    def store
      @store ||= build_store
    end

    def table_path
      File.join(@tmpdir, "l1.strata")
    end

    # A second handle on the table, as another process would open it.
    def open_table
      table = Strata::Tiers::SharedMemory.new(path: table_path, size: TABLE_SIZE)
      @stores << table
      table
    end

    # The key the store uses for name, as it reaches the tier.
    def tier_key(cache, name, options = {})
      cache.send(:normalize_key, name, cache.send(:merged_options, options))
    end

    # Reports sent to ActiveSupport.error_reporter while the block runs.
    def capture_reports
      reporter = ReportCollector.new
      ActiveSupport.error_reporter.subscribe(reporter)
      yield
      reporter.reports
    ensure
      ActiveSupport.error_reporter.unsubscribe(reporter)
    end

    # Payloads of the events named name while the block runs.
    def capture_events(name)
      payloads = []
      callback = ->(*, payload) { payloads << payload.dup }
      ActiveSupport::Notifications.subscribed(callback, name) { yield }
      payloads
    end

    # An error_reporter subscriber that keeps what it is told.
    class ReportCollector
      attr_reader :reports

      def initialize
        @reports = []
      end

      def report(error, handled:, severity:, context:, source: nil)
        @reports << {error: error, handled: handled, severity: severity, context: context, source: source}
      end
    end
  end
end
