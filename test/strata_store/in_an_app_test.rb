# frozen_string_literal: true

require_relative "store_case"

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

  private

  def sql(**options)
    {path: File.join(@tmpdir, "l3.sqlite3")}.merge(options)
  end
end
