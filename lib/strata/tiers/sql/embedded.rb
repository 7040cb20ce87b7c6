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
        # connection_class's are (WAL, synchronous NORMAL, busy_timeout): the tier's data
        # statements run on these (see Database).
        def sqlite_pool(path, pool:, busy_timeout:)
          ResourcePool.new(size: pool, timeout: CHECKOUT_TIMEOUT) do
            db = ::SQLite3::Database.new(path)
            db.busy_timeout((busy_timeout * 1000).round)
            PRAGMAS.each { |name, value| db.execute("PRAGMA #{name} = #{value}") }
            db
          end
        end

        def next_sequence
          @sequence_lock.synchronize { @sequence += 1 }
        end
      end
    end
  end
end
