# frozen_string_literal: true

require "test_helper"
require "active_record"
require_relative "rails_app"

# Strata::SQLiteBusyHandler: before Active Record 8.0, a thread waiting for SQLite's write lock in
# busy_timeout holds Ruby's GVL, so a holder of the lock in the same process can't run to its
# commit: the waiter fails with "database is locked" once its timeout ends (the demo's writer,
# under readers that fill the SQL tier in the app's SQLite file, failed that way). With the
# handler the waiter sleeps in Ruby, the holder commits, and the waiter's write goes in. Each run
# in a child Ruby, so the adapter here stays as Active Record made it. Without the handler the
# outcome depends on timing (the holder may commit before the waiter starts waiting), so the
# failure it prevents is shown by the demo's load test on SQLite, not here.
class StrataSQLiteBusyHandlerTest < Minitest::Test
  RailsApp = Strata::TestSupport::RailsApp

  # The holder keeps the lock until the waiter sleeps in Ruby (it can look only when it gets
  # the GVL), or for 3 s; the waiter's timeout is 2 s. Prints the waiter's outcome.
  TWO_WRITERS = <<~RUBY
    require "active_record"
    require "active_record/connection_adapters/sqlite3_adapter"
    require "strata/sqlite_busy_handler"
    ActiveRecord::ConnectionAdapters::SQLite3Adapter.prepend(Strata::SQLiteBusyHandler) if ENV["HANDLER"] == "1"
    ActiveRecord::Base.establish_connection(adapter: "sqlite3", database: ARGV[0], timeout: 2000, pool: 3)
    ActiveRecord::Base.connection.execute("CREATE TABLE rows (x integer)")
    locked = Queue.new
    waiter = nil
    holder = Thread.new do
      ActiveRecord::Base.connection_pool.with_connection do |connection|
        connection.transaction do
          connection.execute("INSERT INTO rows VALUES (1)")
          locked << true
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 3
          Thread.pass until waiter&.status == "sleep" || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        end
      end
    end
    locked.pop
    waiter = Thread.new do
      ActiveRecord::Base.connection_pool.with_connection { |connection| connection.execute("INSERT INTO rows VALUES (2)") }
      "written"
    rescue => e
      e.class.name
    end
    holder.join
    puts waiter.value
    puts ActiveRecord::Base.connection.select_value("SELECT COUNT(*) FROM rows")
  RUBY

  def setup
    @dir = Strata::TestSupport.private_tmpdir
  end

  def teardown
    FileUtils.remove_entry(@dir)
  end

  def test_a_writer_waiting_for_the_lock_lets_its_holder_in_the_same_process_commit
    assert_equal "written\n2\n", two_writers(handler: true).out
  end

  # The Railtie prepends it to the adapter before Active Record 8.0, unless turned off.
  def test_the_railtie_prepends_it_unless_turned_off
    app = RailsApp.tiny_app(File.join(@dir, "app"), <<~RUBY)
      config.strata.sqlite_busy_handler = ENV["TINY_HANDLER"] != "off"
    RUBY
    check = 'require "./config/environment"; require "active_record/connection_adapters/sqlite3_adapter"; ' \
      "p !!(defined?(Strata::SQLiteBusyHandler) && ActiveRecord::ConnectionAdapters::SQLite3Adapter.include?(Strata::SQLiteBusyHandler))"
    on = RailsApp.ruby(app, "-e", "require 'active_record/railtie'; #{check}")
    assert on.success?, on.to_s
    assert_equal "#{ActiveRecord.version < Gem::Version.new("8.0")}\n", on.out
    off = RailsApp.ruby(app, "-e", "require 'active_record/railtie'; #{check}", env: {"TINY_HANDLER" => "off"})
    assert off.success?, off.to_s
    assert_equal "false\n", off.out
  end

  private

  def two_writers(handler:)
    result = RailsApp.ruby(@dir, "-e", TWO_WRITERS, File.join(@dir, "#{handler}.sqlite3"), env: {"HANDLER" => handler ? "1" : "0"})
    assert result.success?, result.to_s
    result
  end
end
