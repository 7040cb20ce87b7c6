# frozen_string_literal: true

module Strata
  module Tiers
    class SQL
      # What differs between the databases the SQL tier runs on. Its upserts (ON CONFLICT ... DO
      # UPDATE ... WHERE, RETURNING) read the same on SQLite 3.35+ and PostgreSQL 9.5+. MySQL and
      # MariaDB have neither, so Statements writes their set and adds another way, and Writes runs
      # them (see #returning?); the rest of the SQL (IN lists, ranges, derived tables) is common to all.
      module Dialect
        # The dialect for an Active Record adapter name; ArgumentError for a database the tier
        # does not speak.
        def self.for(adapter)
          case adapter.to_s
          when "sqlite3" then SQLite.new
          when "postgresql", "postgis" then PostgreSQL.new
          when "trilogy", "mysql2" then MySQL.new
          else raise ArgumentError, "Strata::Tiers::SQL runs on SQLite, PostgreSQL and MySQL/MariaDB, not #{adapter.inspect}"
          end
        end

        # What a dialect answers unless it says otherwise.
        class Base
          # name, a plain identifier the caller validated, quoted the SQL standard's way.
          def quote(name)
            %("#{name}")
          end

          # The text of the index-th (1-based) bind parameter.
          def placeholder(_index)
            "?"
          end

          # Whether INSERT ... ON CONFLICT and RETURNING are there: set and the adds are then
          # one statement each.
          def returning?
            true
          end

          # Whether a statement can notify a channel that a connection LISTENs on (PostgreSQL):
          # the log's appends then wake the pollers (see Listener).
          def notifications?
            false
          end

          # Whether bind values must be written into the statement's text (see MySQL).
          def binds_in_text?
            false
          end

          # A statement whose one value bounds the table's bytes from above, cheaply; nil where
          # the database has no such bound.
          def database_bytes
            nil
          end

          # Whether error may pass on retry, beyond the Active Record classes SQL#translate knows
          # (lock and statement timeouts, deadlocks).
          def retryable?(_error)
            false
          end
        end

        class SQLite < Base
          def name
            "sqlite"
          end

          # The id a rewritten row takes, so that it moves to the back of the FIFO. The table is
          # locked for the write, so MAX(id) cannot move under the statement.
          def next_id(table)
            "(SELECT MAX(id) FROM #{table}) + 1"
          end

          # The size of the whole database file in bytes, as this transaction sees it: an upper
          # bound on the table's SUM(byte_size), since SQLite stores every key and value byte as
          # it is. Two header reads, no table scan.
          def database_bytes
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
          end

          # A busy database (another writer held the lock past busy_timeout) may pass on retry.
          def retryable?(error)
            defined?(::SQLite3::BusyException) && error.cause.is_a?(::SQLite3::BusyException)
          end
        end

        # No database_bytes: PostgreSQL compresses large values (TOAST), so no relation size
        # bounds the bytes written.
        class PostgreSQL < Base
          def name
            "postgresql"
          end

          def placeholder(index)
            "$#{index}"
          end

          def notifications?
            true
          end

          # The row proposed for insertion already drew the id sequence's next value.
          def next_id(_table)
            "excluded.id"
          end
        end

        # MySQL and MariaDB, through Active Record's trilogy or mysql2 adapter. No RETURNING and
        # no ON CONFLICT: a set is a REPLACE (which deletes the old row and inserts a new one, so
        # a rewrite takes a new id as the FIFO needs), an add a plain INSERT that a live row
        # refuses. No database_bytes: InnoDB's files hold free pages, indexes and undo, and no
        # cheap bound on the table's bytes comes from them.
        class MySQL < Base
          def name
            "mysql"
          end

          # KEY is a reserved word there.
          def quote(name)
            "`#{name}`"
          end

          def returning?
            false
          end

          # The trilogy adapter sends a statement's text as it is and drops its binds, so the
          # tier writes each value in, quoted by the connection (see Database).
          def binds_in_text?
            true
          end
        end
      end
    end
  end
end
