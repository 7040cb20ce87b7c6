# frozen_string_literal: true

module Strata
  module Tiers
    class SQL
      # The SQL tier's face on Active Record: checking connections out of a class's pool, running
      # statements with bind parameters (prepared where the adapter prepares), decoding the rows,
      # and turning every database error into a Strata::TierError. No models: the tier's hot path
      # allocates no records.
      class Database
        # Active Record errors that may pass when tried again later.
        RETRYABLE = [
          ActiveRecord::LockWaitTimeout, ActiveRecord::StatementTimeout, ActiveRecord::QueryCanceled,
          ActiveRecord::TransactionRollbackError, ActiveRecord::ConnectionTimeoutError
        ].freeze
        NO_BINDS = [].freeze

        attr_reader :connection_class

        # connection_class: an Active Record class whose pool reaches the database. owned: true
        # when the tier made the class (embedded), so that #close may remove its pool.
        def initialize(connection_class, owned:)
          @connection_class = connection_class
          @owned = owned
          @dialect = nil
          @closed = false
        end

        # The Dialect of the class's database, read on first use: Active Record may not know the
        # app's database yet when the tier is made (Rails makes caches early in boot).
        def dialect
          @dialect ||= Dialect.for(@connection_class.connection_db_config.adapter)
        end

        # Checks a connection out for the block and returns the block's value. The one place a
        # database error is judged: it becomes a RetryableError when a retry may pass, else a
        # TierError, both naming the database and operation.
        def run(operation)
          raise TierError.new("#{description} is closed", tier: :l3) if @closed

          @connection_class.connection_pool.with_connection { |c| yield c }
        rescue ActiveRecord::ActiveRecordError => e
          raise translate(e, operation)
        end

        # The decoded rows of a query, read past the app's query cache (a cached read would miss
        # the writes made since).
        def select(c, operation, sql, binds = NO_BINDS)
          result = if c.query_cache_enabled
            c.uncached { c.select_all(sql, name(operation), binds, preparable: true) }
          else
            c.select_all(sql, name(operation), binds, preparable: true)
          end
          decoded(result)
        end

        # The decoded rows a writing statement returned (RETURNING), if any.
        def write(c, operation, sql, binds)
          decoded(c.exec_query(sql, name(operation), binds, prepare: true))
        end

        # The number of rows a DELETE removed.
        def delete(c, operation, sql)
          c.exec_delete(sql, name(operation))
        end

        # Removes the pool if the tier made it; marks this database closed either way.
        def close
          @closed = true
          @connection_class.remove_connection if @owned
        end

        def closed?
          @closed
        end

        # "Strata L3 <adapter>:<host>:<port>/<database>", never the password.
        def description
          config = @connection_class.connection_db_config.configuration_hash
          address = config[:host] ? "#{config[:host]}#{":#{config[:port]}" if config[:port]}/" : ""
          "Strata L3 #{config[:adapter]}:#{address}#{config[:database]}"
        rescue ActiveRecord::ActiveRecordError
          "Strata L3 #{@connection_class.name}"
        end

        private

        def name(operation)
          "Strata L3 #{operation}"
        end

        # The message keeps the error's first line (the rest is SQL context or advice); the error
        # itself stays as the cause.
        def translate(error, operation)
          message = "#{description} #{operation}: #{error.class}: #{error.message.lines.first&.strip}"
          retryable = RETRYABLE.any? { |klass| error.is_a?(klass) } || @dialect&.retryable?(error)
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
