# frozen_string_literal: true

require_relative "store_case"
require "logger"
require "socket"
require "stringio"

# What an app meets with the SQL tier under L1: the tier's stats, writes that fail in one tier,
# values too large for some tiers, and how failures reach the log and the error reporter.
class StrataStoreInAnAppTest < Strata::StoreCase
  # The SQL tier's hits count the app's reads: the read-back of a write (the stack's settle
  # check) is no hit.
  def test_the_sql_tiers_hits_count_reads_not_the_read_back_of_writes
    cache = build_store(sql: sql)
    cache.write("a", 1)
    cache.write("b", 2)
    cache.write_multi("c" => 3, "d" => 4)

    stats = cache.stack[:l3].stats
    assert_equal 4, stats[:sets]
    assert_equal 0, stats[:hits]

    cache.stack[:l1].delete(tier_key(cache, "a"))
    assert_equal 1, cache.read("a")
    assert_equal 1, cache.stack[:l3].stats[:hits]
  end

  # Another process holds the SQLite file's write lock: the write's SQL half fails (and so does
  # dropping the old row), so the write is false: L1's copy is new, but once L1 lets it go the
  # SQL tier would answer with the value it replaced.
  def test_a_write_whose_sql_half_failed_is_false
    cache = build_store(sql: sql(busy_timeout: 0))
    cache.write("key", "old")
    locker = SQLite3::Database.new(sql[:path])
    locker.execute("BEGIN IMMEDIATE")

    reports = capture_reports { refute cache.write("key", "new") }
    assert_equal [:l3], reports.map { |report| report[:context][:tier] }.uniq
  ensure
    locker&.close
  end

  # A dead memcached fails every call: each failure is counted, but its kind is reported and
  # logged once, not once per call.
  def test_an_outage_is_reported_and_logged_once_and_the_rest_counted
    log = StringIO.new
    cache = build_store(memcached: {servers: ["127.0.0.1:#{closed_port}"], connect_timeout: 0.2})
    cache.logger = Logger.new(log)

    reports = capture_reports do
      20.times do |i|
        cache.read("key-#{i}")
        cache.write("key-#{i}", i)
      end
    end
    kinds = reports.map { |report| [report[:context][:tier], report[:error].class, report[:context][:server]] }
    assert_equal kinds.uniq, kinds, "one report per tier, error class and server"
    assert_equal [:l2], kinds.map(&:first).uniq

    stats = cache.stats
    failed = stats[:failures].values.sum
    assert_operator failed, :>=, 40, "every failed call is counted"
    assert_equal failed - reports.size, stats[:unreported]
    assert_equal reports.size, log.string.lines.grep(/StrataStore l2/).size, "each report is logged once"
  end

  # With no error_reporter subscriber (a Rails app's default) a failure still reaches the log:
  # the store's logger, else Rails.logger.
  def test_a_failure_reaches_rails_logger_when_the_store_has_no_logger
    log = StringIO.new
    rails_logger = Logger.new(log)
    defined_here = !defined?(::Rails)
    Object.const_set(:Rails, Module.new) if defined_here
    ::Rails.singleton_class.send(:define_method, :logger) { rails_logger } unless ::Rails.respond_to?(:logger)
    cache = build_store(memcached: {servers: ["127.0.0.1:#{closed_port}"], connect_timeout: 0.2})
    cache.logger = nil

    cache.read("key")
    assert_match(/StrataStore l2 .*Strata::/, log.string)
  ensure
    Object.send(:remove_const, :Rails) if defined_here
  end

  # A value too large for L1 (but not for the SQL tier) is stored in the SQL tier, read back from
  # it, counted every time and reported once. One too large for every tier is computed by each
  # fetch (nothing can keep it) and reported once per tier.
  def test_a_value_too_large_for_a_tier_is_stored_below_counted_and_reported_once
    cache = build_store(l1: {size: 4 << 20, segment_size: 64 << 10}, sql: sql(max_value_size: 200_000))
    large = "x" * 100_000
    reports = capture_reports do
      5.times { |i| assert cache.write("large", large + i.to_s) }
      assert_equal "#{large}4", cache.read("large")
    end
    assert_equal [[Strata::ValueTooLargeError, :l1]], reports.map { |report| [report[:error].class, report[:context][:tier]] }

    runs = 0
    huge = "y" * 300_000
    reports = capture_reports do
      3.times do
        value = cache.fetch("huge") do
          runs += 1
          huge
        end
        assert_equal huge, value
      end
    end
    assert_equal 3, runs
    assert_equal [:l3], reports.map { |report| report[:context][:tier] }, "L1's refusal was reported already"
    stats = cache.stats
    assert_operator stats[:too_large][:l1], :>=, 8
    assert_equal 3, stats[:too_large][:l3]
    assert_equal 3, stats[:tiers][:l3][:too_large]

    refute cache.write("huge", huge), "no tier can hold it"
    assert_equal 1, cache.stats[:too_large][:every_tier]
  end

  private

  def closed_port
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end

  def sql(**options)
    {path: File.join(@tmpdir, "l3.sqlite3")}.merge(options)
  end
end
