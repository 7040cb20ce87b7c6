# frozen_string_literal: true

module Strata
  module Tiers
    class SQL
      # Every statement the SQL tier runs, as text built once per tier for its table and dialect.
      # Pure: nothing here touches a connection. Values always travel as bind parameters, in the
      # order each method's comment gives (on MySQL, Database quotes them into the text); only
      # integers the tier read from the table itself (ids) and its own validated numbers (batch
      # sizes) are written in here.
      #
      # A rewrite (set, or add over an expired or colliding row) gives the row a new id, so the
      # FIFO order by id is the order of last writes. SQLite may hand the id of a row deleted from
      # the top of the table to the next write, so the tier reads ids and deletes them in one
      # transaction (SQL#expire, #cleanup): a delete by id never removes a write made after the read.
      class Statements
        # get_multi pads its IN list to one of these lengths, so that a few prepared statements
        # serve every batch. Batches are at most the last one.
        IN_LIST_SIZES = [1, 2, 4, 8, 16, 32, 64, 128].freeze
        MAX_IN_LIST = IN_LIST_SIZES.last
        # cleanup deletes in steps of this many rows, each its own short statement.
        CLEANUP_STEP = 1000

        # An expiry pass counts the table exactly while its ids span at most EXACT_SPAN, or while
        # it holds at most EXACT_ROWS rows. Past both, it counts the newest EXACT_ROWS + 1 rows
        # exactly, and below them SAMPLE_WINDOWS windows of SAMPLE_WINDOW ids, one in each equal
        # stretch of the remaining ids, scaled up (see SQL#table_totals). So a pass reads a
        # bounded number of rows on a table of any size.
        EXACT_SPAN = 20_000
        EXACT_ROWS = 2_000
        SAMPLE_WINDOWS = 20
        SAMPLE_WINDOW = 250

        attr_reader :get, :set, :add, :add_counted, :add_vacate, :delete, :delete_live, :clear, :head, :expired_head, :totals, :max_id,
          :expired_ids, :id_range, :newest_totals, :sample_totals, :database_bytes

        # table: an identifier the caller validated; it is quoted here.
        def initialize(table, dialect, expiry_batch_size:)
          @dialect = dialect
          @table = dialect.quote(table)
          @key = dialect.quote("key")
          @columns = "key_hash, #{@key}, value, expires_at, created_at, byte_size"
          @get_multi = {}
          @add_counted = nil
          build(expiry_batch_size)
          dialect.returning? ? build_upserts : build_mysql_writes
        end

        # Whether set, add and delete are the one-statement upserts with RETURNING (SQLite,
        # PostgreSQL), else the MySQL forms (see #build_mysql_writes).
        def returning?
          @dialect.returning?
        end

        # Binds: the key_hashes (count of them, padded to an IN_LIST_SIZES length), then now (ms).
        # Rows: key, value.
        def get_multi(count)
          @get_multi.fetch(count) { raise ArgumentError, "no IN list of #{count}" }
        end

        # The IN list length for count keys (count <= MAX_IN_LIST).
        def in_list_size(count)
          IN_LIST_SIZES.find { |size| size >= count }
        end

        # ids: Integers read from the table.
        def delete_ids(ids)
          "DELETE FROM #{@table} WHERE id IN (#{ids.map { |id| Integer(id) }.join(", ")})"
        end

        private

        def build(batch)
          # Binds: key_hash, key, now (ms). Rows: value.
          @get = "SELECT value FROM #{@table} WHERE key_hash = #{bind(1)} AND #{@key} = #{bind(2)} " \
            "AND (expires_at = 0 OR expires_at > #{bind(3)})"
          IN_LIST_SIZES.each do |size|
            hashes = (1..size).map { |index| bind(index) }.join(", ")
            @get_multi[size] = "SELECT #{@key}, value FROM #{@table} WHERE key_hash IN (#{hashes}) " \
              "AND (expires_at = 0 OR expires_at > #{bind(size + 1)})"
          end
          @clear = "DELETE FROM #{@table}"
          # The front of the FIFO: the next candidates of an expiry pass.
          @head = "SELECT id, byte_size, expires_at, created_at FROM #{@table} ORDER BY id LIMIT #{Integer(batch)}"
          # The rows of the front that have expired or outlived max_age, the only candidates of a
          # pass while the table is within budget. Binds: now (ms), written_before (ms).
          @expired_head = "SELECT id, byte_size, expires_at, created_at FROM (#{@head}) AS head " \
            "WHERE (expires_at <> 0 AND expires_at <= #{bind(1)}) OR created_at < #{bind(2)} ORDER BY id"
          @totals = "SELECT COUNT(*) AS entries, COALESCE(SUM(byte_size), 0) AS bytes FROM #{@table}"
          @max_id = "SELECT COALESCE(MAX(id), 0) AS id FROM #{@table}"
          # The lowest and highest id: two index lookups (one query asking for both would scan).
          @id_range = "SELECT (SELECT MIN(id) FROM #{@table}), (SELECT MAX(id) FROM #{@table})"
          # Rows: the bytes of the whole database (an upper bound on the table's), or nil where the
          # dialect has no such bound.
          @database_bytes = @dialect.database_bytes
          # Entries, bytes and lowest id of the newest EXACT_ROWS + 1 rows (all rows, if fewer).
          @newest_totals = "SELECT COUNT(*), COALESCE(SUM(byte_size), 0), MIN(id) " \
            "FROM (SELECT id, byte_size FROM #{@table} ORDER BY id DESC LIMIT #{EXACT_ROWS + 1}) AS newest"
          # Binds: 2 * SAMPLE_WINDOWS pairs of (from id, below id); an empty pair is (0, 0).
          # Rows: entries and bytes of the rows in those id ranges, which never overlap. One range
          # count per pair, added up: on SQLite a third cheaper than one scan of the ranges OR'd,
          # which first gathers and dedupes the rowids.
          ranges = (0...SAMPLE_WINDOWS * 2).map do |pair|
            "SELECT COUNT(*) AS entries, COALESCE(SUM(byte_size), 0) AS bytes FROM #{@table} " \
              "WHERE id >= #{bind(pair * 2 + 1)} AND id < #{bind(pair * 2 + 2)}"
          end
          @sample_totals = "SELECT COALESCE(SUM(entries), 0), COALESCE(SUM(bytes), 0) " \
            "FROM (#{ranges.join(" UNION ALL ")}) AS windows"
          # Binds: after id, up to id, now (ms), written before (ms; 0 when there is no max_age).
          # Rows: id, at most CLEANUP_STEP, in id order.
          @expired_ids = "SELECT id FROM #{@table} WHERE id > #{bind(1)} AND id <= #{bind(2)} " \
            "AND ((expires_at <> 0 AND expires_at <= #{bind(3)}) OR created_at < #{bind(4)}) " \
            "ORDER BY id LIMIT #{CLEANUP_STEP}"
        end

        # SQLite and PostgreSQL.
        def build_upserts
          # Binds: key_hash, key, value, expires_at, created_at (now, ms), byte_size.
          @set = upsert
          # Same binds; a row comes back when stored. An existing row gives way only to another
          # key (a hash collision: the slot goes to the newer key) or when it has expired.
          add_counted = "#{upsert} WHERE #{@table}.#{@key} <> excluded.#{@key} " \
            "OR (#{@table}.expires_at <> 0 AND #{@table}.expires_at <= excluded.created_at)"
          @add = "#{add_counted} RETURNING id"
          # SQLite: add without RETURNING, read by the rows it changed, which skips a result row
          # (about a tenth of the statement's cost; read-through fills write with add).
          @add_counted = add_counted if @dialect.is_a?(Dialect::SQLite)
          # Binds: key_hash, key. Rows: expires_at of the row removed.
          @delete = "DELETE FROM #{@table} WHERE key_hash = #{bind(1)} AND #{@key} = #{bind(2)} RETURNING expires_at"
        end

        def upsert
          values = (1..6).map { |index| bind(index) }.join(", ")
          "INSERT INTO #{@table} (#{@columns}) VALUES (#{values}) " \
            "ON CONFLICT (key_hash) DO UPDATE SET id = #{@dialect.next_id(@table)}, #{@key} = excluded.#{@key}, " \
            "value = excluded.value, expires_at = excluded.expires_at, created_at = excluded.created_at, " \
            "byte_size = excluded.byte_size"
        end

        # MySQL and MariaDB: no RETURNING, so the tier reads what a write did from the rows it
        # changed, and an add takes two statements.
        def build_mysql_writes
          values = (1..6).map { |index| bind(index) }.join(", ")
          # Binds: key_hash, key, value, expires_at, created_at (now, ms), byte_size. REPLACE
          # deletes the key_hash's row and inserts a new one, with a new id.
          @set = "REPLACE INTO #{@table} (#{@columns}) VALUES (#{values})"
          # Binds: key_hash, key, now (ms). Removes the row an add may take: another key's (a hash
          # collision) or an expired one.
          @add_vacate = "DELETE FROM #{@table} WHERE key_hash = #{bind(1)} AND (#{@key} <> #{bind(2)} " \
            "OR (expires_at <> 0 AND expires_at <= #{bind(3)}))"
          # Binds as set's. After add_vacate, a row still there is live and refuses the insert (a
          # duplicate key error, which SQL#add reads as not stored).
          @add = "INSERT INTO #{@table} (#{@columns}) VALUES (#{values})"
          # Binds: key_hash, key. Rows changed: whether a row went.
          @delete = "DELETE FROM #{@table} WHERE key_hash = #{bind(1)} AND #{@key} = #{bind(2)}"
          # Binds: key_hash, key, now (ms). Rows changed: whether a live row went.
          @delete_live = "#{@delete} AND (expires_at = 0 OR expires_at > #{bind(3)})"
        end

        def bind(index)
          @dialect.placeholder(index)
        end
      end
    end
  end
end
