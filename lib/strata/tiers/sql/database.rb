# frozen_string_literal: true

require "strata/errors"
require "strata/resource_pool"

module Strata
  module Tiers
    class SQL
      # The SQL tier's face on Active Record: checking connections out of a class's pool, running
      # statements with bind parameters (prepared where the adapter prepares; on MySQL quoted into
      # the text, see Dialect::MySQL), decoding the rows, and turning every database error into a
      # Strata::TierError. No models: the tier's hot path allocates no records.
      #
      # On SQLite the statements run on the pooled connection's own SQLite3::Database, prepared
      # once per connection: Active Record's statement path (logging, type casting, result
      # objects) cost four times the SQLite work for the tier's one-row reads and upserts.
      # For an app's connection_class Active Record owns the connections (pooling, fork safety,
      # reconnects); the embedded file has a pool of its own (sqlite_pool below).
      class Database
        # Active Record errors that may pass when tried again later.
        RETRYABLE = [
          ActiveRecord::LockWaitTimeout, ActiveRecord::StatementTimeout, ActiveRecord::QueryCanceled,
          ActiveRecord::TransactionRollbackError, ActiveRecord::ConnectionTimeoutError
        ].freeze
        NO_BINDS = [].freeze
        # How many times #run runs a block that the database rolled back as a deadlock's victim.
        DEADLOCK_ATTEMPTS = 3
        # On the embedded pool's connections, #run holds interrupts (Timeout, Thread#raise) off
        # while the block runs: one raised inside SQLite's busy handler (Embedded.wait_for_locks)
        # would unwind through sqlite3_step with the connection's mutex held. A pending interrupt
        # ends a lock wait at once instead, and is raised as the block returns or fails: it waits
        # for the statements that are running, never for a lock.
        HOLD_INTERRUPTS = {Object => :never}.freeze

        # connection_class: an Active Record class whose pool reaches the database, or its name
        # (see #connection_class). owned: true when the tier made the class (embedded), so that
        # #close may remove its pool.
        # sqlite_pool: for the embedded file, a Strata::ResourcePool of SQLite3::Database
        # connections (Embedded.sqlite_pool) that #run checks out instead of an Active Record
        # connection: Active Record's checkout and checkin cost more than the SQLite work of a
        # one-row read (14 of 25 us). Active Record still makes the schema (#run_active_record).
        def initialize(connection_class, owned:, sqlite_pool: nil)
          @connection_class = connection_class.is_a?(String) ? nil : connection_class
          @class_name = connection_class.is_a?(String) ? connection_class : connection_class.name
          @owned = owned
          @sqlite_pool = sqlite_pool
          @dialect = nil
          @closed = false
          # SQLite3::Database => {sql => prepared SQLite3::Statement}, held strongly (a WeakMap
          # would drop the statements at any GC); entries of closed connections are dropped when
          # a new connection comes. Only the thread holding a connection touches its statements.
          @prepared = {}.compare_by_identity
          @prepared_lock = Mutex.new
          @deadlock_reruns = 0
          @reruns_lock = Mutex.new
        end

        # The Active Record class. One given by name (connection_class: "CacheRecord", as
        # config.cache_store needs: the app's models can't be loaded while Rails reads its
        # configuration) is looked up at first use after the app has booted. Until then, and
        # while no such class is defined, the database is not connected yet
        # (ActiveRecord::ConnectionNotEstablished, which the poller's first rounds pass over
        # silently, Poller#booting?); a constant that is no Active Record class is a TierError.
        def connection_class
          @connection_class ||= named_class
        end

        # How many times #run ran a block again after a deadlock, in this process.
        def deadlock_reruns
          @reruns_lock.synchronize { @deadlock_reruns }
        end

        # The Dialect of the class's database, read on first use: Active Record may not know the
        # app's database yet when the tier is made (Rails makes caches early in boot).
        def dialect
          @dialect ||= Dialect.for(connection_class.connection_db_config.adapter)
        end

        # Checks a connection out for the block and returns the block's value. The one place a
        # database error is judged: it becomes a RetryableError when a retry may pass, else a
        # TierError, both naming the database and operation. A block the database rolls back as a
        # deadlock's victim runs again (see #rerun_deadlocked), so it must be safe to run twice.
        def run(operation, &)
          guarded(operation) do
            next @sqlite_pool.with { |db| Thread.handle_interrupt(HOLD_INTERRUPTS) { yield db } } if @sqlite_pool

            connection_class.connection_pool.with_connection do |c|
              c.transaction_open? ? isolated(c, &) : rerun_deadlocked(c, &)
            end
          end
        end

        # #run on an Active Record connection even when the embedded pool is there: for the schema.
        def run_active_record(operation, &)
          guarded(operation) { connection_class.connection_pool.with_connection(&) }
        end

        # The decoded rows of a query, read past the app's query cache (a cached read would miss
        # the writes made since).
        def select(c, operation, sql, binds = NO_BINDS)
          return native_rows(c, sql, binds) if native?

          sql, binds = in_text(c, sql, binds) if dialect.binds_in_text?
          result = if c.query_cache_enabled
            c.uncached { c.select_all(sql, name(operation), binds, preparable: true) }
          else
            c.select_all(sql, name(operation), binds, preparable: true)
          end
          decoded(result)
        end

        # The decoded rows a writing statement returned (RETURNING), if any.
        def write(c, operation, sql, binds)
          return native_rows(c, sql, binds) if native?

          sql, binds = in_text(c, sql, binds) if dialect.binds_in_text?
          decoded(c.exec_query(sql, name(operation), binds, prepare: true))
        end

        # The number of rows a writing statement changed.
        def changed(c, operation, sql, binds)
          return native_changes(c, sql, binds) if native?

          sql, binds = in_text(c, sql, binds) if dialect.binds_in_text?
          c.exec_update(sql, name(operation), binds)
        end

        # Runs an INSERT: false when a row with its unique key_hash is there (the database refused
        # it), else true. For the dialects without ON CONFLICT. On MySQL a refused statement leaves
        # the transaction around it usable.
        def inserted?(c, operation, sql, binds)
          changed(c, operation, sql, binds)
          true
        rescue ActiveRecord::RecordNotUnique
          false
        end

        # Runs the block in one transaction on c, and returns its value: committed when the block
        # returns, rolled back when it raises. On SQLite the write lock is taken at BEGIN
        # (IMMEDIATE), so two writers wait on busy_timeout rather than fail on upgrading a read.
        # Inside a transaction the app opened on c, the block joins it.
        def transaction(c, &)
          return c.transaction(&) unless native?
          return yield if app_transaction?(c)

          db = sqlite(c)
          committed = false
          begin
            # Inside the begin: an interrupt that lands as BEGIN returns (a Timeout that ran out
            # while it waited for the lock) still rolls back.
            db.execute("BEGIN IMMEDIATE")
            result = yield
            db.execute("COMMIT")
            committed = true
            result
          ensure
            # Any exception, an interrupt included: nothing half-done is committed, and the pooled
            # connection goes back without an open transaction. A second interrupt waits.
            Thread.handle_interrupt(Exception => :never) { db.execute("ROLLBACK") if db.transaction_active? } unless committed
          end
        end

        # The number of rows a DELETE removed.
        def delete(c, operation, sql)
          return native_delete(c, sql) if native?

          c.exec_delete(sql, name(operation))
        end

        # string as a bind that the database receives as bytes (blob, bytea), never as text. On
        # SQLite's own connection a binary String is a blob; Active Record needs its Binary type.
        def blob(string)
          bytes = (string.encoding == Encoding::BINARY) ? string : string.b
          native? ? bytes : ActiveModel::Type::Binary::Data.new(bytes)
        end

        # Removes the pool if the tier made it; marks this database closed either way.
        def close
          @closed = true
          @sqlite_pool&.shutdown { |db| close_sqlite(db) }
          @connection_class.remove_connection if @owned
        end

        def closed?
          @closed
        end

        # "Strata L3 <adapter>:<host>:<port>/<database>", never the password.
        def description
          config = connection_class.connection_db_config.configuration_hash
          address = config[:host] ? "#{config[:host]}#{":#{config[:port]}" if config[:port]}/" : ""
          "Strata L3 #{config[:adapter]}:#{address}#{config[:database]}"
        rescue ActiveRecord::ActiveRecordError
          "Strata L3 #{@class_name}"
        end

        private

        def named_class
          raise ActiveRecord::ConnectionNotEstablished, "#{@class_name} is looked up once the app has booted" if app_booting?

          named = Object.const_get(@class_name)
          return named if named.is_a?(Class) && named <= ActiveRecord::Base

          raise TierError.new("connection_class #{@class_name} is #{named.inspect}, not an Active Record class", tier: :l3)
        rescue NameError => e
          raise ActiveRecord::ConnectionNotEstablished, "connection_class #{@class_name} is not defined: #{e.message}"
        end

        # Whether a Rails app is initializing: looking a model up from here (another thread, an
        # early initializer) would load Active Record before the app configured it.
        def app_booting?
          return false unless defined?(::Rails) && ::Rails.respond_to?(:application)

          app = ::Rails.application
          !app.nil? && !app.initialized?
        end

        # The one place a database error is judged (see #run).
        def guarded(operation)
          raise TierError.new("#{description} is closed", tier: :l3) if @closed

          yield
        rescue ActiveRecord::ActiveRecordError => e
          raise translate(e, operation)
        rescue *native_errors => e
          raise translate(e, operation)
        rescue ResourcePool::TimeoutError => e
          raise RetryableError.new("#{description} #{operation}: no free connection (#{e.message})", tier: :l3)
        end

        # SQLite refuses to close a connection whose prepared statements are still open.
        def close_sqlite(db)
          @prepared_lock.synchronize { @prepared.delete(db) }&.each_value(&:close)
          db.close
        rescue ::SQLite3::Exception
          nil # closing is best effort; the process drops the handle either way
        end

        # The SQLite3::Database under c: c itself from the embedded pool, else the Active Record
        # connection's.
        def sqlite(c)
          c.is_a?(::SQLite3::Database) ? c : c.raw_connection
        end

        # Inside a transaction the app opened on c, the block runs in a savepoint: a statement of
        # the tier's that fails is undone alone, and the app's transaction stays usable
        # (PostgreSQL refuses every statement of a transaction after its first error).
        def isolated(c)
          c.transaction(requires_new: true) { yield c }
        end

        # Outside an app transaction the block's statements are whole transactions of their own
        # (autocommit, or #transaction). InnoDB's REPLACE and INSERT lock gaps of the key_hash
        # index, so writers on neighbouring keys can deadlock; the server then rolls back one
        # victim's transaction whole and asks for it to be run again. So the block runs again, up
        # to DEADLOCK_ATTEMPTS times in all. Inside an app transaction the victim is the app's
        # transaction, which only the app can run again (#isolated).
        def rerun_deadlocked(c)
          attempts = 0
          begin
            yield c
          rescue ActiveRecord::Deadlocked
            attempts += 1
            raise if attempts >= DEADLOCK_ATTEMPTS

            @reruns_lock.synchronize { @deadlock_reruns += 1 }
            retry
          end
        end

        # Whether c is an app's Active Record connection inside a transaction the app opened.
        def app_transaction?(c)
          !c.is_a?(::SQLite3::Database) && c.transaction_open?
        end

        # Whether statements run on SQLite's own connection (see the class comment).
        def native?
          dialect.is_a?(Dialect::SQLite)
        end

        def native_errors
          defined?(::SQLite3::Exception) ? [::SQLite3::Exception] : []
        end

        # [sql with each ? replaced by its bind, quoted by c; no binds]. Statements has no other ?.
        def in_text(c, sql, binds)
          raise ArgumentError, "#{binds.size} binds for #{sql.count("?")} placeholders" unless sql.count("?") == binds.size

          index = -1
          [sql.gsub("?") { c.quote(binds[index += 1]) }, NO_BINDS]
        end

        # Rows (arrays, in column order) of sql run with binds on c's SQLite connection. The
        # embedded pool's connections keep their statements prepared (the tier closes them). An
        # app's connection gets a statement per call: Active Record may close it at any time
        # (reaping, reconnecting), and SQLite keeps a handle with open statements alive.
        def native_rows(c, sql, binds)
          owned = c.is_a?(::SQLite3::Database)
          statement = owned ? statement(c, sql) : sqlite(c).prepare(sql)
          statement.reset!
          binds.each_with_index { |bind, index| statement.bind_param(index + 1, bind) }
          rows = []
          # Bound: one row per step until SQLite says done; the tier's statements return few.
          while (row = statement.step)
            rows << row
          end
          rows
        ensure
          # A statement left mid-result would hold SQLite's read snapshot.
          owned ? statement&.reset! : statement&.close
        end

        # SQLite's count of the rows the statement just run changed.
        def native_changes(c, sql, binds)
          native_rows(c, sql, binds)
          sqlite(c).changes
        end

        def native_delete(c, sql)
          raw = sqlite(c)
          raw.execute(sql)
          raw.changes
        end

        def statement(raw, sql)
          statements = @prepared[raw] || prepared_for(raw)
          statements[sql] ||= raw.prepare(sql)
        end

        def prepared_for(raw)
          @prepared_lock.synchronize do
            @prepared.delete_if { |db, _| db.closed? }
            @prepared[raw] ||= {}
          end
        end

        def name(operation)
          "Strata L3 #{operation}"
        end

        # A busy SQLite file, raised by the sqlite3 gem or wrapped by Active Record (as
        # StatementInvalid): asked before the dialect is known too, when the tables are made.
        def sqlite_busy?(error)
          return false unless defined?(::SQLite3::BusyException)

          error.is_a?(::SQLite3::BusyException) || error.cause.is_a?(::SQLite3::BusyException)
        end

        # The message keeps the error's first line (the rest is SQL context or advice); the error
        # itself stays as the cause.
        def translate(error, operation)
          message = "#{description} #{operation}: #{error.class}: #{error.message.lines.first&.strip}"
          retryable = RETRYABLE.any? { |klass| error.is_a?(klass) } || @dialect&.retryable?(error) || sqlite_busy?(error)
          (retryable ? RetryableError : TierError).new(message, tier: :l3)
        end

        # Result rows as Ruby values. PostgreSQL sends bytea as escaped text, which the column's
        # type decodes; SQLite's values arrive decoded (and without column types).
        def decoded(result)
          types = result.column_types
          return result.rows if types.empty?

          casts = result.columns.map { |column| types[column] }
          result.rows.map { |row| row.each_with_index.map { |value, index| casts[index] ? casts[index].deserialize(value) : value } }
        end
      end
    end
  end
end
