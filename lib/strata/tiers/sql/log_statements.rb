# frozen_string_literal: true

module Strata
  module Tiers
    class SQL
      # The statements of the versions and log tables (Schema; docs/coherence.md), as text built
      # once per tier. Pure, as Statements is: values travel as binds, and only integers the tier
      # made itself (tag ids parsed from version keys, ids read from the log) are written in.
      #
      # Log ids are handed out at insert and become visible at commit, which on PostgreSQL and
      # MySQL need not be in id order: a reader may see id 11 before id 10 commits. Strata::Poller
      # rescans such gaps. On SQLite one writer at a time inserts and commits, so ids appear in
      # order; a rolled-back id may be handed out again, which no reader saw.
      class LogStatements
        # Rows one read of the log returns, at most.
        PAGE = 1_000

        attr_reader :version_get, :version_set, :version_add, :version_delete, :versions_clear,
          :append, :after, :head, :front

        # table: the entries' table name, validated by the caller; the derived names are quoted here.
        # trim_batch: log rows one expiry pass reads from the front.
        def initialize(table, dialect, trim_batch:)
          @dialect = dialect
          @versions = dialect.quote(Schema.versions_table(table))
          @log = dialect.quote(Schema.log_table(table))
          build_versions
          build_log(Schema.log_table(table), trim_batch)
        end

        # Binds: none. Rows: tag_id, version, for the tag ids given (Integers).
        def versions_in(ids)
          "SELECT tag_id, version FROM #{@versions} WHERE tag_id IN (#{ids.map { |id| Integer(id) }.join(", ")})"
        end

        # Rows: id, tag_id, key of the log rows with the ids given (Integers).
        def rows_in(ids)
          "SELECT id, tag_id, #{@dialect.quote("key")} FROM #{@log} WHERE id IN (#{ids.map { |id| Integer(id) }.join(", ")})"
        end

        def delete_ids(ids)
          "DELETE FROM #{@log} WHERE id IN (#{ids.map { |id| Integer(id) }.join(", ")})"
        end

        private

        def build_versions
          # Binds: tag_id. Rows: version.
          @version_get = "SELECT version FROM #{@versions} WHERE tag_id = #{bind(1)}"
          values = "(tag_id, version) VALUES (#{bind(1)}, #{bind(2)})"
          # Binds: tag_id, version. The add's rows changed: 1 when it stored.
          if @dialect.returning?
            @version_set = "INSERT INTO #{@versions} #{values} ON CONFLICT (tag_id) DO UPDATE SET version = excluded.version"
            @version_add = "INSERT INTO #{@versions} #{values} ON CONFLICT (tag_id) DO NOTHING"
          else
            @version_set = "REPLACE INTO #{@versions} #{values}"
            @version_add = "INSERT IGNORE INTO #{@versions} #{values}"
          end
          # Binds: tag_id. Rows changed: whether there was one.
          @version_delete = "DELETE FROM #{@versions} WHERE tag_id = #{bind(1)}"
          @versions_clear = "DELETE FROM #{@versions}"
        end

        def build_log(name, trim_batch)
          key = @dialect.quote("key")
          # Binds: created_at (now, ms), tag_id or nil, key or nil. Where the dialect has
          # notifications (PostgreSQL) the statement also notifies the log's channel, so that LISTENing pollers wake at the commit.
          insert = "INSERT INTO #{@log} (created_at, tag_id, #{key}) VALUES (#{bind(1)}, #{bind(2)}, #{bind(3)})"
          @append = if @dialect.notifications?
            "WITH logged AS (#{insert} RETURNING id) SELECT COUNT(pg_notify('#{name}', '')) FROM logged"
          else
            insert
          end
          # Binds: the last id read. Rows: id, tag_id, key, at most PAGE, in id order.
          @after = "SELECT id, tag_id, #{key} FROM #{@log} WHERE id > #{bind(1)} ORDER BY id LIMIT #{PAGE}"
          # Rows: the highest id, 0 for an empty log.
          @head = "SELECT COALESCE(MAX(id), 0) FROM #{@log}"
          # Rows: id, created_at of the oldest trim_batch + 1 rows, for a trim (SQL#trim_log).
          @front = "SELECT id, created_at FROM #{@log} ORDER BY id LIMIT #{Integer(trim_batch) + 1}"
        end

        def bind(index)
          @dialect.placeholder(index)
        end
      end
    end
  end
end
