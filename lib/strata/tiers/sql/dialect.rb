# frozen_string_literal: true

module Strata
  module Tiers
    class SQL
      # What differs between the databases the SQL tier runs on. The rest of its SQL (upserts with
      # ON CONFLICT ... DO UPDATE ... WHERE, RETURNING, IN lists) reads the same on SQLite 3.35+
      # and PostgreSQL 9.5+, so Statements writes it once.
      module Dialect
        # The dialect for an Active Record adapter name; ArgumentError for a database the tier
        # does not speak (MySQL has no RETURNING and another upsert syntax).
        def self.for(adapter)
          case adapter.to_s
          when "sqlite3" then SQLite.new
          when "postgresql", "postgis" then PostgreSQL.new
          else raise ArgumentError, "Strata::Tiers::SQL runs on SQLite and PostgreSQL, not #{adapter.inspect}"
          end
        end

        class SQLite
          def name
            "sqlite"
          end

          # The text of the index-th (1-based) bind parameter.
          def placeholder(_index)
            "?"
          end

          # The id a rewritten row takes, so that it moves to the back of the FIFO. The table is
          # locked for the write, so MAX(id) cannot move under the statement.
          def next_id(table)
            "(SELECT MAX(id) FROM #{table}) + 1"
          end

          # A statement whose one value is the size of the whole database file in bytes, as this
          # transaction sees it: an upper bound on the table's SUM(byte_size), since SQLite stores
          # every key and value byte as it is. Two header reads, no table scan.
          def database_bytes
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
          end

          # A busy database (another writer held the lock past busy_timeout) may pass on retry.
          def retryable?(error)
            defined?(::SQLite3::BusyException) && error.cause.is_a?(::SQLite3::BusyException)
          end
        end

        class PostgreSQL
          def name
            "postgresql"
          end

          def placeholder(index)
            "$#{index}"
          end

          # The row proposed for insertion already drew the id sequence's next value.
          def next_id(_table)
            "excluded.id"
          end

          # None: PostgreSQL compresses large values (TOAST), so no relation size bounds the bytes
          # written.
          def database_bytes
            nil
          end

          # Lock and statement timeouts arrive as Active Record's own classes (see SQL#translate).
          def retryable?(_error)
            false
          end
        end
      end
    end
  end
end
