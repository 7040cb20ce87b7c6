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
      #
      # A deleted key's row stays behind as a tombstone (see SQL#delete): its expires_at is the
      # negated time it lapses, and its value is never read (empty, or the mark of #bury). Reads
      # take it for an expired row; expiry keeps it until that time; a fill that read before it
      # was made can't replace it (fill_add).
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
        # stretch of the remaining ids, scaled up (see Sizing). So a pass reads a
        # bounded number of rows on a table of any size.
        # Rows a page of live_keys reads.
        KEYS_PAGE = 1_000
        EXACT_SPAN = 20_000
        EXACT_ROWS = 2_000
        SAMPLE_WINDOWS = 20
        SAMPLE_WINDOW = 250

        attr_reader :get, :get_for_fill, :set, :replace, :add, :add_counted, :add_vacate, :fill_add, :fill_add_counted, :fill_vacate,
          :bury, :bury_live, :retract, :clear, :head, :expired_head, :totals, :max_id, :expired_ids, :id_range,
          :newest_totals, :sample_totals, :database_bytes, :live_keys

        # table: an identifier the caller validated; it is quoted here.
        def initialize(table, dialect, expiry_batch_size:)
          @dialect = dialect
          @table = dialect.quote(table)
          @key = dialect.quote("key")
          @columns = "key_hash, #{@key}, value, expires_at, created_at, byte_size"
          @get_multi = {}
          @add_counted = nil
          @fill_add_counted = nil
          @bury = nil
          @bury_live = nil
          build(expiry_batch_size)
          dialect.returning? ? build_upserts : build_mysql_writes
        end

        # Whether set, add and fill_add are the one-statement upserts with RETURNING (SQLite,
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
          # Binds as get's. Rows: value, expires_at, id of the key's live row or live tombstone.
          @get_for_fill = "SELECT value, expires_at, id FROM #{@table} WHERE key_hash = #{bind(1)} AND #{@key} = #{bind(2)} " \
            "AND (expires_at = 0 OR ABS(expires_at) > #{bind(3)})"
          # Turns the key's row into a tombstone while it holds the value given, keeping its id
          # (no fill read a tombstone with that id: a row takes a new id whenever it is
          # rewritten). Binds: value (empty), expires_at (negative), created_at (now, ms),
          # byte_size, key_hash, key, the value. Rows changed: whether it held that value.
          @retract = "#{entomb} AND value = #{bind(7)}"
          # Rewrites the key's live row while it holds the value given (Tier#replace), keeping
          # its id: a live row's id is no tombstone a fill read. Binds: value, expires_at,
          # created_at, byte_size, key_hash, key, the value it must hold, now. Rows changed:
          # whether it held that value.
          @replace = "#{entomb} AND value = #{bind(7)} AND (expires_at = 0 OR expires_at > #{bind(8)})"
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
            "WHERE (expires_at <> 0 AND ABS(expires_at) <= #{bind(1)}) OR created_at < #{bind(2)} ORDER BY id"
          # A page of live keys in id order, for SQL#keys (tombstones and expired rows are not
          # live). Binds: the last id of the page before (0 for the first), now (ms). Rows: id, key.
          @live_keys = "SELECT id, #{@key} FROM #{@table} WHERE id > #{bind(1)} " \
            "AND (expires_at = 0 OR expires_at > #{bind(2)}) ORDER BY id LIMIT #{KEYS_PAGE}"
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
            "AND ((expires_at <> 0 AND ABS(expires_at) <= #{bind(3)}) OR created_at < #{bind(4)}) " \
            "ORDER BY id LIMIT #{CLEANUP_STEP}"
        end

        # SQLite and PostgreSQL.
        def build_upserts
          # Binds: key_hash, key, value, expires_at, created_at (now, ms), byte_size.
          @set = upsert
          # A tombstone over any row of the key, in one statement: set's values, for a tombstone,
          # except that a live row keeps its id (no fill read a tombstone with that id: a row
          # takes a new id whenever it is rewritten), which spares moving it in the table.
          # Binds as set's, then a mark: the value the tombstone keeps when it buried a live row,
          # where it is never read. Rows: that value (the mark when a live row was there, else
          # empty).
          live = "#{@table}.#{@key} = excluded.#{@key} AND (#{@table}.expires_at = 0 OR #{@table}.expires_at > excluded.created_at)"
          @bury = "#{upsert(value: "CASE WHEN #{live} THEN #{bind(7)} ELSE excluded.value END",
            id: "CASE WHEN #{live} THEN #{@table}.id ELSE #{@dialect.next_id(@table)} END")} RETURNING value"
          # Same binds; a row comes back when stored. An existing row gives way only to another
          # key (a hash collision: the slot goes to the newer key) or when it has expired (a
          # tombstone reads as expired).
          other_key = "#{@table}.#{@key} <> excluded.#{@key}"
          add_counted = "#{upsert} WHERE #{other_key} OR (#{@table}.expires_at <> 0 AND #{@table}.expires_at <= excluded.created_at)"
          @add = "#{add_counted} RETURNING id"
          # Binds as add's, then the id of the tombstone the fill read (0: none). A live tombstone
          # gives way only when it is that one: any other was made after the fill's read.
          fill_add_counted = "#{upsert} WHERE #{other_key} " \
            "OR (#{@table}.expires_at > 0 AND #{@table}.expires_at <= excluded.created_at) " \
            "OR (#{@table}.expires_at < 0 AND (-#{@table}.expires_at <= excluded.created_at OR #{@table}.id = #{bind(7)}))"
          @fill_add = "#{fill_add_counted} RETURNING id"
          # SQLite: the adds without RETURNING, read by the rows they changed, which skips a result
          # row (about a tenth of the statement's cost; read-through fills write with fill_add).
          if @dialect.is_a?(Dialect::SQLite)
            @add_counted = add_counted
            @fill_add_counted = fill_add_counted
          end
        end

        # value, id: what the conflicting row's value and id become (the new value, the next id,
        # unless given).
        def upsert(value: "excluded.value", id: @dialect.next_id(@table))
          values = (1..6).map { |index| bind(index) }.join(", ")
          "INSERT INTO #{@table} (#{@columns}) VALUES (#{values}) " \
            "ON CONFLICT (key_hash) DO UPDATE SET id = #{id}, #{@key} = excluded.#{@key}, " \
            "value = #{value}, expires_at = excluded.expires_at, created_at = excluded.created_at, " \
            "byte_size = excluded.byte_size"
        end

        # An UPDATE that makes the key's row a tombstone, to be narrowed by more of its WHERE.
        # Binds: value (empty), expires_at (negative), created_at (now, ms), byte_size, key_hash, key.
        def entomb
          "UPDATE #{@table} SET value = #{bind(1)}, expires_at = #{bind(2)}, created_at = #{bind(3)}, " \
            "byte_size = #{bind(4)} WHERE key_hash = #{bind(5)} AND #{@key} = #{bind(6)}"
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
          # Binds: key_hash, key, now (ms), now, the id of the tombstone the fill read (0: none).
          # Removes the row a fill may take (see fill_add), before the insert of add.
          @fill_vacate = "DELETE FROM #{@table} WHERE key_hash = #{bind(1)} AND (#{@key} <> #{bind(2)} " \
            "OR (expires_at > 0 AND expires_at <= #{bind(3)}) OR (expires_at < 0 AND (-expires_at <= #{bind(4)} OR id = #{bind(5)})))"
          # Binds as set's. After add_vacate (or fill_vacate), a row still there is live (or a
          # tombstone made since the fill's read) and refuses the insert (a duplicate key error,
          # which SQL#add reads as not stored).
          @add = "INSERT INTO #{@table} (#{@columns}) VALUES (#{values})"
          # Binds as retract's, with now (ms) last. Rows changed: whether a live row was there
          # (it keeps its id). Where there was none, a set of the tombstone follows.
          @bury_live = "#{entomb} AND (expires_at = 0 OR expires_at > #{bind(7)})"
        end

        def bind(index)
          @dialect.placeholder(index)
        end
      end
    end
  end
end
