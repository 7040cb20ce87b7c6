# frozen_string_literal: true

require "fileutils"
require "strata/resource_pool"

module Strata
  module Tiers
    class SQL
      # The embedded database: one SQLite file with an Active Record pool of its own, apart from
      # the app's connections (and so from the app's transactions).
      #
      # Active Record keys pools by class name and refuses anonymous classes, so each tier gets an
      # abstract class named after its file and a sequence number: two tiers on one file each have
      # a pool, and closing one leaves the other working.
      module Embedded
        # Active Record's defaults since 7.1, named here because the tier's durability and
        # concurrency rest on them; both of the tier's pools set them.
        PRAGMAS = {journal_mode: :wal, synchronous: :normal}.freeze
        # Seconds a statement waits for a free connection of the pool (Active Record's default).
        CHECKOUT_TIMEOUT = 5
        # Seconds a statement sleeps between SQLite's tries at another connection's lock (see
        # #wait_for_locks): sqlite3 2.x's busy_handler_timeout= sleeps as long.
        BUSY_SLEEP = 0.001
        @sequence = 0
        @sequence_lock = Mutex.new

        module_function

        # A new abstract Active Record class connected to the SQLite file at path (created 0600,
        # its directory 0700, when missing). pool: connections; busy_timeout: seconds a statement
        # waits for another process's write lock.
        def connection_class(path, pool:, busy_timeout:)
          FileUtils.mkdir_p(File.dirname(path), mode: 0o700)
          # SQLite gives its -wal and -shm files the database file's mode.
          File.open(path, File::WRONLY | File::CREAT, 0o600, &:close)
          record = Class.new(ActiveRecord::Base)
          label = "Strata::Tiers::SQL::Embedded(#{path})##{next_sequence}"
          record.define_singleton_method(:name) { label }
          record.abstract_class = true
          record.establish_connection(
            adapter: "sqlite3",
            database: path,
            pool: pool,
            timeout: (busy_timeout * 1000).round, # milliseconds
            pragmas: PRAGMAS # 7.1 ignores this key; its defaults are the same
          )
          record
        end

        # A pool of SQLite3::Database connections to the file at path, configured as
        # connection_class's are (WAL, synchronous NORMAL), each waiting up to busy_timeout for
        # another writer's lock (#wait_for_locks): the tier's data statements run on these (see
        # Database).
        def sqlite_pool(path, pool:, busy_timeout:)
          ResourcePool.new(size: pool, timeout: CHECKOUT_TIMEOUT) do
            db = ::SQLite3::Database.new(path)
            wait_for_locks(db, busy_timeout)
            PRAGMAS.each { |name, value| db.execute("PRAGMA #{name} = #{value}") }
            db
          end
        end

        # Makes db wait up to seconds for a lock another connection holds, sleeping in Ruby.
        #
        # SQLite's own busy_timeout sleeps inside sqlite3_step, which the sqlite3 gem (1.x and
        # 2.x alike) calls holding Ruby's GVL: every other thread of the process stops for as long
        # as the lock is held. SQLite calls a busy handler before each retry instead; this one
        # sleeps BUSY_SLEEP in Ruby, which lets the other threads run, and gives up (the statement
        # fails as busy) once seconds have passed since the wait began (count 0).
        #
        # sqlite3 2.x's busy_handler_timeout= does the same, but 1.x lacks it, and it lets an
        # interrupt (Timeout, Thread#raise) raise inside the handler, unwinding through SQLite's
        # C frames with the connection's mutex held. Here a pending interrupt ends the wait (the
        # handler returns false, the statement fails as busy), and Database#run holds interrupts
        # off until the statement is back in Ruby (Database::HOLD_INTERRUPTS).
        def wait_for_locks(db, seconds)
          deadline = nil # only the thread holding db (checked out of the pool) runs its handler
          db.busy_handler do |count|
            now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
            deadline = now + seconds if count.zero?
            next false if now >= deadline || Thread.pending_interrupt?

            sleep(BUSY_SLEEP)
            true
          end
        end

        def next_sequence
          @sequence_lock.synchronize { @sequence += 1 }
        end
      end
    end
  end
end
