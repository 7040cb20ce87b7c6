# frozen_string_literal: true

require "strata/dependencies"

module Strata
  module Tiers
    class SQL
      # The SQL tier's versions table and invalidation log (Schema, LogStatements; see the class
      # comment of SQL): the public face the poller reads, and the writes the tier's own methods
      # make beside their entries. Included in SQL, whose connection (@database), options
      # (@logging, @log_retention, @batch, @table_name) and helpers (count, with_expiry, binary)
      # it uses.
      module VersionsAndLog
        # How a version's 8 bytes are kept in a signed bigint column, and read back the same.
        VERSION_PACK = "q<"

        # {id => the version's 8 bytes} for the tag ids that have a row, hits and misses counted.
        def get_versions(ids)
          found = peek_versions(ids)
          count(:hits, found.size)
          count(:misses, ids.size - found.size)
          found
        end

        # #get_versions, uncounted (see Tier#peek_multi).
        def peek_versions(ids)
          return {} if ids.empty?

          ids.each { |id| check_tag_id(id) }
          rows = @database.run(:get_multi) do |c|
            # Bound: ids.size / MAX_IN_LIST statements.
            ids.uniq.each_slice(Statements::MAX_IN_LIST).flat_map { |slice| @database.select(c, :get_multi, log_statements.versions_in(slice)) }
          end
          rows.to_h { |id, version| [id, [version].pack(VERSION_PACK)] }
        end

        # Upserts tag id's version (bytes: its 8 bytes), with a log row naming the tag. True.
        def set_version(id, bytes)
          write_version(:set, id, bytes)
        end

        # Inserts tag id's version unless it has one: whether it did. No log row: a creation
        # stores what every reader settles on, and changes nothing another host holds.
        def add_version(id, bytes)
          write_version(:add, id, bytes)
        end

        # Deletes the versions of tag ids, with a log row naming each: whether every one was
        # there.
        def delete_versions(ids)
          ids.each { |id| check_tag_id(id) }
          deleted = @database.run(:delete) do |c|
            with_expiry(c, @logging) do
              ids.count do |id| # bound: ids.size statements, in one transaction when logged
                log(c, Entry.now, tag_id: id) if @logging
                @database.changed(c, :delete, log_statements.version_delete, [id]) > 0
              end
            end
          end
          count(:deletes, ids.size)
          deleted == ids.size
        end

        # Whether changes append to the invalidation log (the invalidation_log: option).
        def invalidation_log?
          @logging
        end

        # The log rows after id, in id order, at most LogStatements::PAGE: [[id, tag_id, key], ...]
        # (tag_id and key nil where the row names none).
        def log_after(id)
          @database.run(:log) { |c| @database.select(c, :log, log_statements.after, [id]) }
        end

        # The log rows with the given ids that are there (committed, not trimmed), as #log_after's.
        def log_rows(ids)
          return [] if ids.empty?

          @database.run(:log) do |c|
            ids.each_slice(Statements::MAX_IN_LIST).flat_map { |slice| @database.select(c, :log, log_statements.rows_in(slice)) }
          end
        end

        # The log's highest id (0 when it is empty).
        def log_head
          @database.run(:log) { |c| @database.select(c, :log, log_statements.head).first.first.to_i }
        end

        # Appends a key row for each of keys, in one transaction, and changes nothing else: every
        # host's poller then drops its copies of them (Strata::Poller). For a copy that a shared
        # tier (memcached) held after the change it was older than was applied, and that another
        # host may have taken into its L1 meanwhile (Copies#settle, docs/coherence.md). Nothing
        # without the log.
        def log_keys(keys)
          return unless @logging && !keys.empty?

          keys.each { |key| check_key(key) }
          @database.run(:log) do |c|
            now = Entry.now
            @database.transaction(c) { keys.each { |key| log(c, now, key: key) } }
          end
          nil
        end

        # A Listener on the log's channel (PostgreSQL), on a connection of its own that the caller
        # closes; nil on the other databases, which have no notifications.
        def log_listener
          return nil unless @database.dialect.notifications?

          Listener.new(connection_class.connection_db_config.configuration_hash, Schema.log_table(@table_name))
        rescue ActiveRecord::ActiveRecordError => e
          raise TierError.new("#{@database.description} listener: #{e.class}: #{e.message}", tier: :l3)
        end

        private

        def check_tag_id(id)
          return if id.is_a?(Integer) && id >= 0 && id <= Dependencies::MASK

          raise ArgumentError, "a tag id is an Integer from 0 to #{Dependencies::MASK}, got #{id.inspect}"
        end

        # set (an upsert, with a log row) or add (insert if absent) of tag id's version: whether
        # it stored.
        def write_version(operation, id, bytes)
          check_tag_id(id)
          unless bytes.is_a?(String) && bytes.bytesize == Dependencies::VERSION_BYTES
            raise ArgumentError, "a version is #{Dependencies::VERSION_BYTES} bytes, got #{bytes.inspect} for tag id #{id}"
          end

          binds = [id, bytes.unpack1(VERSION_PACK)]
          stored = @database.run(operation) do |c|
            next @database.changed(c, operation, log_statements.version_add, binds) > 0 unless operation == :set

            with_expiry(c, @logging) do
              @database.write(c, operation, log_statements.version_set, binds)
              log(c, Entry.now, tag_id: id) if @logging
              true
            end
          end
          count(:sets) if stored
          stored
        end

        # Appends a log row on c: of a tag (tag_id), of a key, or of a clear (neither).
        def log(c, now, tag_id: nil, key: nil)
          @database.write(c, :log, log_statements.append, [now, tag_id, key && binary(key)])
        end

        # Deletes the log rows older than log_retention among the oldest expiry_batch_size, never
        # the newest row (so that SQLite never hands its id out again). Bound: one batch.
        def trim_log(c, now)
          front = @database.select(c, :expire, log_statements.front)
          front = (front.size > @batch) ? front.first(@batch) : front[0...-1]
          before = now - (@log_retention * 1000).ceil
          ids = front.filter_map { |id, created_at| id if created_at < before }
          @database.delete(c, :expire, log_statements.delete_ids(ids)) unless ids.empty?
        end

        def log_statements
          @log_statements ||= LogStatements.new(@table_name, @database.dialect, trim_batch: @batch)
        end
      end
    end
  end
end
