# frozen_string_literal: true

module Strata
  module Tiers
    class SQL
      # The SQL tier's one table (DESIGN section 7), through Active Record's schema statements so
      # that each database gets its own types: bigint, blob on SQLite, bytea on PostgreSQL and
      # longblob on MySQL (whose plain blob holds 64 KiB, less than max_value_size's default).
      #
      #   id          the FIFO position: a rewrite takes a new id (see Statements)
      #   key_hash    signed 64-bit hash of the key, unique: the upsert's conflict target
      #   expires_at  unix ms, 0 = never; negative for a tombstone, lapsing at -expires_at (SQL#delete)
      #   created_at  unix ms of the last write (max_age counts from it)
      #   byte_size   key plus value bytes, what max_size adds up
      #   key, value  the bytes, last: a scan of the small columns never reads a large value's pages
      #
      # On SQLite the id is a plain INTEGER PRIMARY KEY (the rowid), not Active Record's
      # AUTOINCREMENT: that keyword makes every insert also rewrite a page of sqlite_sequence, a
      # fifth of an insert's cost. Without it SQLite may reuse the id of a row deleted from the
      # top of the table, so the tier reads ids and deletes them in one transaction (see Statements).
      #
      # The migration template (lib/generators/strata/sql/templates) writes the same table out in
      # full, as a migration must not change after it has run; a test holds the two equal. On
      # SQLite its table keeps AUTOINCREMENT, which costs that page write and changes nothing else.
      module Schema
        # Active Record's SQLite primary key without AUTOINCREMENT.
        SQLITE_ROWID = "integer PRIMARY KEY NOT NULL"
        # The limit that makes Active Record's MySQL binary column a LONGBLOB.
        MYSQL_VALUE_LIMIT = 16 * 1024 * 1024

        module_function

        # Creates the table and its index unless they exist.
        def create(connection, table_name)
          sqlite = connection.adapter_name.match?(/sqlite/i)
          key = sqlite ? {id: false} : {} # else Active Record's own id column
          value = mysql?(connection) ? {limit: MYSQL_VALUE_LIMIT} : {}
          connection.create_table(table_name, **key, if_not_exists: true) do |t|
            t.column :id, SQLITE_ROWID if sqlite
            t.bigint :key_hash, null: false
            t.bigint :expires_at, null: false, default: 0
            t.bigint :created_at, null: false
            t.integer :byte_size, null: false
            t.binary :key, null: false
            t.binary :value, null: false, **value
          end
          connection.add_index(table_name, :key_hash, unique: true, if_not_exists: true)
        end

        # Whether connection is MySQL's or MariaDB's (the trilogy or mysql2 adapter).
        def mysql?(connection)
          connection.adapter_name.match?(/mysql|trilogy/i)
        end
      end
    end
  end
end
