# frozen_string_literal: true

require "test_helper"
require "support/sql_tier_contract"
require "support/waiting"
require "timeout"

# Tiers::SQL on its embedded SQLite file: the contract (SqlTierContract), then what only the
# embedded database has: a file of its own, its pragmas, reopening, a busy lock, the options.
class SqlTierTest < Minitest::Test
  include Strata::TestSupport::SqlTierContract
  include Strata::Waiting

  # Stands for an app's abstract class on a SQLite database of its own.
  class AppRecord < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @dir = Strata::TestSupport.private_tmpdir
    @path = File.join(@dir, "cache", "l3.sqlite3")
    @tiers = []
    @tier = build_tier
  end

  def teardown
    @tiers.each(&:close)
    FileUtils.remove_entry(@dir)
  end

  def build_tier(**options)
    tier = SQL.new(path: @path, **options)
    @tiers << tier
    tier
  end

  # This process's open descriptors on files whose path contains name.
  def descriptors_on(name)
    Dir.children("/proc/self/fd").count do |fd|
      File.readlink("/proc/self/fd/#{fd}").include?(name)
    rescue SystemCallError
      false # closed meanwhile
    end
  end

  # A tier on AppRecord's connection to a SQLite file of the app's; the test removes the
  # connection.
  def app_tier(**options)
    AppRecord.establish_connection(adapter: "sqlite3", database: File.join(@dir, "app.sqlite3"))
    SQL.create_table!(AppRecord)
    tier = SQL.new(connection_class: AppRecord, **options)
    @tiers << tier
    tier
  end

  # The statements tier runs for expiry passes, as written.
  def expiry_statements(tier)
    run = []
    tier.instance_variable_get(:@database).singleton_class.prepend(Module.new do
      define_method(:select) do |c, operation, sql, *binds|
        run << sql if operation == :expire
        super(c, operation, sql, *binds)
      end
    end)
    run
  end

  def test_a_pass_on_a_table_far_within_its_bounds_counts_no_rows
    tier = build_tier(max_size: 64 << 20, max_entries: 100_000, expire_every: 1)
    run = expiry_statements(tier)
    60.times { |i| tier.set("key#{i}", "v" * 100) }
    statements = tier.send(:statements)
    refute_empty run
    assert_empty run & [statements.totals, statements.newest_totals, statements.sample_totals],
      "the id span and the file size were enough to know nothing is over budget"
    assert_equal 60, tier.stats[:entries]
  end

  def test_a_file_over_max_size_has_its_rows_counted_and_the_oldest_go
    tier = build_tier(max_size: 3_000, expire_every: 1)
    run = expiry_statements(tier)
    40.times { |i| tier.set("key#{i}", "v" * 100) }
    assert_includes run, tier.send(:statements).totals, "a 3,000-byte bound is below any SQLite file"
    assert_operator tier.stats[:bytes], :<=, 3_000 + 105
    assert_nil tier.get("key0"), "the oldest row went"
    assert_equal "v" * 100, tier.get("key39")
  end

  def test_committed_entries_survive_close_and_reopen
    @tier.set("durable", "bytes\x00\xFF".b, ttl: 3600)
    @tier.set("gone", "v")
    @tier.delete("gone")
    @tier.close

    reopened = build_tier
    assert_equal "bytes\x00\xFF".b, reopened.get("durable")
    assert_nil reopened.get("gone")
  end

  def test_processes_write_one_file_at_once
    pids = 3.times.map do |n|
      fork_child { 100.times.all? { |i| @tier.set("p#{n}-#{i}", "#{n}:#{i}") } }
    end
    100.times { |i| @tier.set("parent-#{i}", i.to_s) }
    statuses = pids.map { |pid| reap(pid, DEADLINE) }

    assert statuses.all? { |status| status&.success? }, "every writer finished: #{statuses.inspect}"
    keys = (0...3).flat_map { |n| (0...100).map { |i| "p#{n}-#{i}" } }
    assert_equal 300, @tier.get_multi(keys).size
    assert_equal "2:99", @tier.get("p2-99")
  end

  def test_wal_mode_synchronous_normal_and_a_private_file
    modes = @tier.connection_class.connection_pool.with_connection do |c|
      [c.select_value("PRAGMA journal_mode"), c.select_value("PRAGMA synchronous")]
    end
    assert_equal ["wal", 1], modes # synchronous 1 is NORMAL
    assert_equal 0o600, File.stat(@path).mode & 0o777
    assert_equal 0o700, File.stat(File.dirname(@path)).mode & 0o777
  end

  def test_two_tiers_on_one_file_share_entries_and_close_apart
    other = build_tier
    @tier.set("shared", "v")
    assert_equal "v", other.get("shared")

    other.close
    assert_predicate other, :closed?
    assert_raises(Strata::TierError) { other.get("shared") }
    other.close # twice is fine
    assert_equal "v", @tier.get("shared"), "closing one tier leaves the other's pool alone"
  end

  # Another process holds SQLite's write lock: a write waits busy_timeout, then raises a
  # RetryableError; it succeeds once the lock is gone.
  def test_a_busy_database_raises_a_retryable_error
    tier = build_tier(busy_timeout: 0.1)
    locker = SQLite3::Database.new(@path)
    locker.execute("BEGIN IMMEDIATE")
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    error = assert_raises(Strata::RetryableError) { tier.set("k", "v") }
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 5
    assert_equal :l3, error.tier
    assert_match(/locked/, error.message)

    locker.rollback
    assert tier.set("k", "v")
  ensure
    locker&.close
  end

  # Making the tables on a file another connection holds locked: Active Record reports the busy
  # file wrapped (StatementInvalid), before the tier knows its dialect. That is a RetryableError,
  # tried again for busy_timeout, and the tier opens once the lock is gone.
  def test_making_the_tables_on_a_busy_file_is_retryable
    fresh = File.join(@dir, "fresh.sqlite3")
    locker = SQLite3::Database.new(fresh)
    locker.execute("BEGIN IMMEDIATE")
    error = assert_raises(Strata::RetryableError) { Strata::Tiers::SQL.new(path: fresh, busy_timeout: 0.1) }
    assert_match(/create_table/, error.message)

    locker.rollback
    tier = Strata::Tiers::SQL.new(path: fresh, busy_timeout: 0.1)
    assert tier.set("k", "v")
  ensure
    tier&.close
    locker&.close
  end

  # A write waits for another connection's write lock in Ruby's sleep, not in SQLite's
  # busy_timeout, which holds the GVL: a second thread keeps running meanwhile, and the write goes
  # through once the lock is let go. (With SQLite's busy_timeout nothing else runs until the wait
  # ends and the write fails as busy.)
  def test_a_write_waiting_for_the_lock_lets_the_other_threads_run
    tier = build_tier(busy_timeout: 10)
    tier.get("warm") # the pooled connection is open before the lock is taken
    locker = SQLite3::Database.new(@path)
    locker.execute("BEGIN IMMEDIATE")
    writer = Thread.new { tier.set("k", "v") }
    assert wait_until { writer.status == "sleep" || !writer.alive? }
    assert writer.alive?, "the writer waits for the lock"

    ticks = 0
    runner = Thread.new do
      loop do
        ticks += 1
        Thread.pass
      end
    end
    assert wait_until { ticks >= 1_000 }, "another thread runs while the writer waits"
    assert writer.alive?, "the writer is still waiting for the lock"

    locker.commit
    assert writer.value
    assert_equal "v", tier.get("k")
  ensure
    runner&.kill&.join
    writer&.join rescue nil # rubocop:disable Style/RescueModifier -- its failure is asserted above
    locker&.close
  end

  # An interrupt (Timeout, Thread#raise) that reaches a write waiting for the lock ends the wait
  # and is raised in the writer; the pooled connection is left usable. (Raised inside SQLite's
  # busy handler, it would unwind through sqlite3_step and leave the connection's mutex held:
  # its next statement hangs the process, holding the GVL.) In a child, so that a hang fails.
  def test_an_interrupt_ends_a_lock_wait_and_leaves_the_connection_usable
    pid = fork_child do
      tier = build_tier(pool: 1, busy_timeout: 10)
      tier.get("warm")
      locker = SQLite3::Database.new(@path)
      locker.execute("BEGIN IMMEDIATE")
      writer = Thread.new { tier.set("k", "interrupted") }
      writer.report_on_exception = false
      wait_until { writer.status == "sleep" } or raise "the writer never waited"
      writer.raise(Timeout::Error, "interrupt while waiting for the lock")
      raised = begin
        writer.join
        nil
      rescue Timeout::Error => e
        e
      end
      raise "the interrupt did not reach the writer" unless raised

      locker.rollback
      Thread.new { tier.set("k", "next") }.value && tier.get("k") == "next"
    end
    status = reap(pid, DEADLINE) || (Process.kill(:KILL, pid) && reap(pid, DEADLINE) && nil)

    assert status&.success?, "the child finished, the pooled connection usable: #{status.inspect}"
  end

  # No free connection in the embedded pool within its wait is the tier's RetryableError, never
  # the pool's own error (ResourcePool::TimeoutError).
  def test_no_free_connection_is_a_retryable_error
    tier = build_tier(pool: 1)
    tier.set("k", "v")
    pool = tier.instance_variable_get(:@database).instance_variable_get(:@sqlite_pool)
    pool.instance_variable_set(:@timeout, 0.05) # Embedded::CHECKOUT_TIMEOUT is 5 s
    error = pool.with { assert_raises(Strata::RetryableError) { tier.get("k") } }
    assert_equal :l3, error.tier
    assert_match(/no free connection/, error.message)
    assert_equal "v", tier.get("k")
  end

  def test_the_table_has_no_autoincrement
    db = SQLite3::Database.new(@path)
    ddl = db.get_first_value("SELECT sql FROM sqlite_master WHERE name = 'strata_entries'")
    assert_match(/"id" integer PRIMARY KEY NOT NULL/, ddl)
    refute_match(/AUTOINCREMENT/i, ddl)
  ensure
    db&.close
  end

  # Without AUTOINCREMENT SQLite gives the next insert the id of a row deleted from the top of
  # the table. A second tier writes in the middle of an expiry pass that chose that top row:
  # the pass holds the write lock, so the write either waits it out or fails, and never takes
  # the victim's id to be deleted with it.
  def test_an_expiry_pass_never_deletes_a_write_that_took_a_victims_id
    tier = build_tier(expire_every: 3, expiry_batch_size: 3)
    other = build_tier(busy_timeout: 0)
    tier.set("kept", "v")
    tier.set("expired", "v", ttl: -1) # the top row, and the pass's victim
    outcome = nil
    tier.instance_variable_get(:@expiry).define_singleton_method(:victims) do |*args|
      outcome = begin
        other.delete("expired")
        other.set("fresh", "new")
      rescue Strata::RetryableError
        :busy
      end
      super(*args)
    end

    tier.set("third", "v") # the third write runs the pass first
    refute_nil outcome, "the other tier wrote during the pass"
    assert_equal "new", other.get("fresh") unless outcome == :busy
    assert_equal "v", tier.get("kept")
    assert_equal 1, tier.stats[:expired]
  end

  # An interrupt (a Timeout that ran out while BEGIN waited for another writer's lock) lands just
  # as BEGIN IMMEDIATE returns: the transaction is rolled back, and the pooled connection goes
  # back without the write lock, so the other writers and this tier's next write carry on.
  def test_an_interrupt_as_begin_returns_leaves_no_transaction_open
    tier = build_tier(pool: 1, expire_every: 1) # every write runs a pass, in a transaction
    tier.set("warm", "v")
    pooled = tier.instance_variable_get(:@database).instance_variable_get(:@sqlite_pool).with { |db| db }
    interrupts = 1
    pooled.define_singleton_method(:execute) do |sql, *args|
      result = super(sql, *args)
      raise Timeout::Error, "interrupt after BEGIN" if sql.start_with?("BEGIN") && (interrupts -= 1) == 0
      result
    end
    assert_raises(Timeout::Error) { tier.set("interrupted", "v") }

    refute_predicate pooled, :transaction_active?
    assert build_tier(busy_timeout: 0).set("other writer", "v"), "the write lock was let go"
    assert tier.set("next", "v")
    assert_nil tier.get("interrupted")
  end

  def test_a_tier_closed_before_its_first_call_raises_tier_errors
    tier = build_tier
    tier.close
    [-> { tier.get("k") }, -> { tier.set("k", "v") }, -> { tier.set_multi({"k" => "v"}) }, -> { tier.delete("k") }].each do |call|
      assert_raises(Strata::TierError, &call)
    end
  end

  # On the app's own SQLite connection (connection_class:) the tier's statements run on the raw
  # SQLite handle, inside the app's transaction when there is one.
  def test_on_an_apps_sqlite_connection_writes_join_the_apps_transaction
    tier = app_tier(expire_every: 1)
    written = writes_through_app_transactions(AppRecord, tier)
    assert_equal({"kept" => "v", "dropped" => nil, "also dropped" => nil}, written)
    assert tier.set("outside", "v"), "and a write outside any transaction of the app's"
    assert_equal "v", tier.get("outside")
  ensure
    AppRecord.remove_connection
  end

  # Active Record closes an app's connections when it likes (reaping, reconnecting); the tier
  # leaves no statement open on them that would keep the SQLite handle and its file open.
  def test_on_an_apps_sqlite_connection_a_disconnect_closes_the_file
    tier = app_tier
    3.times do
      tier.set("k", "v")
      tier.get("k")
      AppRecord.connection_pool.disconnect!
    end
    assert_equal 0, descriptors_on("app.sqlite3"), "descriptors still open on the app's database file"
  ensure
    AppRecord.remove_connection
  end

  # config.cache_store can't name a model of the app (not loaded yet): a class given by name is
  # looked up at first use. Until it is defined the database is not connected, which the
  # poller's first rounds pass over (Poller#booting?); a constant that is no Active Record class
  # is a TierError; neither is ever an exception of another kind.
  def test_a_connection_class_given_by_name_is_looked_up_at_first_use
    tier = SQL.new(connection_class: "SqlTierTest::LaterRecord")
    @tiers << tier
    error = assert_raises(Strata::TierError) { tier.get("k") }
    assert_kind_of ActiveRecord::ConnectionNotEstablished, error.cause
    assert_match(/SqlTierTest::LaterRecord is not defined/, error.message)

    self.class.const_set(:LaterRecord, Class.new(AppRecord))
    LaterRecord.establish_connection(adapter: "sqlite3", database: File.join(@dir, "app.sqlite3"))
    SQL.create_table!(LaterRecord)
    assert tier.set("k", "v")
    assert_equal "v", tier.get("k")
    assert_same LaterRecord, tier.connection_class

    not_a_record = SQL.new(connection_class: "SqlTierTest")
    @tiers << not_a_record
    error = assert_raises(Strata::TierError) { not_a_record.get("k") }
    assert_match(/SqlTierTest is SqlTierTest, not an Active Record class/, error.message)
  ensure
    LaterRecord.remove_connection if self.class.const_defined?(:LaterRecord, false)
    self.class.send(:remove_const, :LaterRecord) if self.class.const_defined?(:LaterRecord, false)
  end

  def test_an_unusable_path_raises_a_tier_error
    blocker = File.join(@dir, "a-file")
    File.write(blocker, "")
    error = assert_raises(Strata::TierError) { SQL.new(path: File.join(blocker, "l3.sqlite3")) }
    assert_equal :l3, error.tier
    assert_includes error.message, blocker
  end

  def test_bad_options_raise_argument_errors_naming_the_option
    {
      {connection_class: ActiveRecord::Base} => /not both/,
      {path: nil} => /path: \(embedded SQLite\) or connection_class:/,
      {path: ""} => /path/,
      {table_name: "bad name"} => /table_name/,
      {table_name: "x; DROP TABLE y"} => /table_name/,
      {max_size: 0} => /max_size/,
      {max_size: 1.5} => /max_size/,
      {max_entries: -1} => /max_entries/,
      {max_age: 0} => /max_age/,
      {max_value_size: nil} => /max_value_size/,
      {expiry_batch_size: 0} => /expiry_batch_size/,
      {expiry_batch_size: 10_001} => /expiry_batch_size/,
      {expiry_batch_size: 10, expire_every: 11} => /expire_every/,
      {tombstone_ttl: 0} => /tombstone_ttl/,
      {tombstone_ttl: Float::INFINITY} => /tombstone_ttl/,
      {table_name: "t" * 55} => /table_name .* at most 54/,
      {log_retention: 0} => /log_retention/,
      {invalidation_log: "yes"} => /invalidation_log/,
      {pool: 0} => /pool/,
      {busy_timeout: -1} => /busy_timeout/,
      {bogus: 1} => /bogus/
    }.each do |options, message|
      error = assert_raises(ArgumentError, options.inspect) { SQL.new(path: @path, **options) }
      assert_match message, error.message, options.inspect
    end

    {
      {connection_class: String} => /connection_class/,
      {connection_class: "not a constant"} => /connection_class/,
      {connection_class: :AppRecord} => /connection_class/,
      {connection_class: ActiveRecord::Base, pool: 2} => /pool/,
      {connection_class: ActiveRecord::Base, busy_timeout: 1} => /busy_timeout/
    }.each do |options, message|
      error = assert_raises(ArgumentError, options.inspect) { SQL.new(**options) }
      assert_match message, error.message, options.inspect
    end
  end

  def test_the_log_is_off_on_the_embedded_file_unless_asked_and_on_with_a_connection_class
    refute_predicate @tier, :invalidation_log?
    assert_predicate build_tier(invalidation_log: true), :invalidation_log?
    assert_predicate app_tier, :invalidation_log?
    refute_predicate app_tier(invalidation_log: false), :invalidation_log?
    assert_nil @tier.log_listener, "SQLite has no notifications"
    assert_equal "t" * 54, build_tier(table_name: "t" * 54).table_name, "the longest name whose derived tables fit"
  ensure
    AppRecord.remove_connection
  end

  def test_the_sql_tier_alone_loads_active_record
    script = 'require "strata"; abort "Active Record loaded" if defined?(ActiveRecord); ' \
      'require "strata/tiers/sql"; abort "no Active Record" unless defined?(ActiveRecord::Base)'
    assert system(RbConfig.ruby, "-Ilib", "-e", script, chdir: File.expand_path("../..", __dir__))
  end
end
