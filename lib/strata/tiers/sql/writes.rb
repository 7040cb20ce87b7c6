# frozen_string_literal: true

module Strata
  module Tiers
    class SQL
      # How the SQL tier's set, adds and tombstones run their Statements on a connection, in the
      # two forms Statements builds: one upsert each, read by what it returns or changes (SQLite,
      # PostgreSQL), or MySQL's REPLACE and a delete-then-insert, read by the rows they changed
      # (see Dialect#returning?). SQL picks one with Writes.for and never asks which.
      module Writes
        def self.for(database, statements)
          statements.returning? ? Upserts.new(database, statements) : MySQL.new(database, statements)
        end

        # What both forms share.
        class Base
          def initialize(database, statements)
            @database = database
            @statements = statements
          end

          # Runs set, add or add_for_fill (operation) with binds (SQL#write_binds) and, for a
          # fill, the token of the tombstone it read, on c: whether it stored (a set always does).
          def stored?(c, operation, binds, token)
            return add?(c, operation, binds, token) unless operation == :set

            @database.write(c, :set, @statements.set, binds)
            true
          end
        end

        class Upserts < Base
          # Leaves a tombstone (fields: its value, expires_at, created_at and byte_size) in place
          # of the row of key (bytes, with its hash) on c, whatever row that is (live, expired, an
          # older tombstone, none): whether it was live.
          def bury(c, hash, key, fields)
            rows = @database.write(c, :delete, @statements.bury, [hash, key, *fields, @database.blob(BURIED_LIVE)])
            !rows.first.first.empty?
          end

          private

          # SQLite reads an add by the rows it changed; PostgreSQL by the row RETURNING gives,
          # which comes only when it stored.
          def add?(c, operation, binds, token)
            fill = operation == :add_for_fill
            binds += [token] if fill
            counted = fill ? @statements.fill_add_counted : @statements.add_counted
            return @database.changed(c, operation, counted, binds) > 0 if counted

            !@database.write(c, operation, fill ? @statements.fill_add : @statements.add, binds).empty?
          end
        end

        # Without ON CONFLICT or RETURNING.
        class MySQL < Base
          # As Upserts#bury: a live row becomes the tombstone; else the tombstone is set over
          # whatever is there. Live is judged at the tombstone's created_at, which is now.
          def bury(c, hash, key, fields)
            now = fields[2]
            return true if @database.changed(c, :delete, @statements.bury_live, [*fields, hash, key, now]) > 0

            @database.write(c, :delete, @statements.set, [hash, key, *fields])
            false
          end

          private

          # Frees the row an add may take, then inserts, which a live row refuses. Binds: key_hash,
          # key, now (and for a fill: now again, the token).
          def add?(c, operation, binds, token)
            vacate = if operation == :add_for_fill
              [@statements.fill_vacate, [*binds.values_at(0, 1, 4, 4), token]]
            else
              [@statements.add_vacate, binds.values_at(0, 1, 4)]
            end
            @database.changed(c, operation, *vacate)
            @database.inserted?(c, operation, @statements.add, binds)
          end
        end
      end
    end
  end
end
