# frozen_string_literal: true

module Strata
  module Tiers
    class SQL
      # The SQL tier's tables (docs/coherence.md for the two beside the entries), through Active Record's schema statements
      # so that each database gets its own types: bigint, blob on SQLite, bytea on PostgreSQL and
      # longblob on MySQL (whose plain blob holds 64 KiB, less than max_value_size's default).
      #
      # <table_name>, the entries:
      #   id          the FIFO position: a rewrite takes a new id (see Statements)
      #   key_hash    signed 64-bit hash of the key, unique: the upsert's conflict target
      #   expires_at  unix ms, 0 = never; negative for a tombstone, lapsing at -expires_at (SQL#delete)
      #   created_at  unix ms of the last write (max_age counts from it)
      #   byte_size   key plus value bytes, what max_size adds up
      #   key, value  the bytes, last: a scan of the small columns never reads a large value's pages
      #
      # <table_name>_versions, the authority of tag versions (Strata::Dependencies), never evicted:
      #   tag_id      the 62-bit tag id, primary key
      #   version     the tag's opaque 62-bit version
      #
      # <table_name>_log, the invalidation log that each host's Strata::Poller reads (LogStatements):
      #   id          the sequence number, auto-increment
      #   created_at  unix ms of the change (log_retention counts from it)
      #   tag_id      set: that tag's version was set or deleted
      #   key         set: that cache key was written or deleted; both NULL: the tier was cleared
      #
      # On SQLite the ids are plain INTEGER PRIMARY KEYs (the rowid), not Active Record's
      # AUTOINCREMENT: that keyword makes every insert also rewrite a page of sqlite_sequence, a
      # fifth of an insert's cost. Without it SQLite may reuse the id of a row deleted from the
      # top of a table, so the tier reads ids and deletes them in one transaction (see Statements),
      # and never trims the log's newest row (LogStatements), so a log id is never handed out twice.
      #
      # The migration template (lib/generators/strata/sql/templates) writes the same tables out in
      # full, as a migration must not change after it has run; a test holds the two equal. On
      # SQLite its tables keep AUTOINCREMENT, which costs that page write and changes nothing else.
      module Schema
        # Active Record's SQLite primary key without AUTOINCREMENT.
        SQLITE_ROWID = "integer PRIMARY KEY NOT NULL"
        # The limit that makes Active Record's MySQL binary column a LONGBLOB.
        MYSQL_VALUE_LIMIT = 16 * 1024 * 1024
        # What the derived tables' names add to table_name; the longest bounds table_name, as
        # identifiers are at most 63 bytes (PostgreSQL's NAMEDATALEN).
        VERSIONS_SUFFIX = "_versions"
        LOG_SUFFIX = "_log"
        MAX_IDENTIFIER = 63
        MAX_TABLE_NAME = MAX_IDENTIFIER - VERSIONS_SUFFIX.bytesize

        module_function

        # Creates the tables and the entries' index unless they exist.
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
          connection.create_table(versions_table(table_name), id: false, if_not_exists: true) do |t|
            t.bigint :tag_id, null: false, primary_key: true, default: nil # default: not auto-increment
            t.bigint :version, null: false
          end
          connection.create_table(log_table(table_name), **key, if_not_exists: true) do |t|
            t.column :id, SQLITE_ROWID if sqlite
            t.bigint :created_at, null: false
            t.bigint :tag_id
            t.binary :key
          end
        end

        def versions_table(table_name)
          "#{table_name}#{VERSIONS_SUFFIX}"
        end

        def log_table(table_name)
          "#{table_name}#{LOG_SUFFIX}"
        end

        # Whether connection is MySQL's or MariaDB's (the trilogy or mysql2 adapter).
        def mysql?(connection)
          connection.adapter_name.match?(/mysql|trilogy/i)
        end
      end
    end
  end
end
