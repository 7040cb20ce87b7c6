# frozen_string_literal: true

require "securerandom"
require "strata/clock"
require "strata/dependencies"
require "strata/entry"

module Strata
  module Tiers
    class SQL
      # <table_name>_raw_tags (id, tag, created_at): the tags that the strata:triggers
      # migration's SQLite triggers append as text when a row changes (docs/coherence.md, "Raw
      # SQL"). SQLite has no SHA-256 in SQL, so a trigger can't compute a tag id; each host's
      # Strata::Poller calls #apply_raw_tags every round, which does what invalidate_tags does in
      # this tier for each tag: a fresh version in the versions table and a row in the log, which
      # the pollers of every host then apply. The migration makes the table; the tier only
      # reads it, and only on SQLite (the other databases' triggers bump versions themselves).
      #
      # Included in SQL, whose connection (@database) and helpers (log, log_statements) it uses,
      # and whose #initialize sets @raw_tags (true once the table was seen) and @raw_tags_looked
      # (Clock.monotonic of the last look for it).
      module RawTags
        SUFFIX = "_raw_tags"
        # Rows one call converts, at most; more wait for the next.
        PAGE = 1_000
        # Seconds between looks for the table while it is not there: the migration may run while
        # the app does.
        LOOK_AGAIN = 1.0
        NO_TAGS = [].freeze

        # Converts the oldest raw tag rows (at most PAGE) into invalidations: each distinct tag
        # gets a fresh random version in the versions table and a log row, and the rows go, all
        # in one transaction (a failure leaves them for the next call; a tag converted twice
        # costs a miss more, nothing else). The tag ids bumped, none without the table or rows.
        # An idle call is one read, without the write lock. Raises Strata::TierError when the
        # database fails.
        def apply_raw_tags
          return NO_TAGS unless raw_tags?
          return NO_TAGS if @database.run(:raw_tags) { |c| @database.select(c, :raw_tags, raw_tag_statements[:any]) }.empty?

          @database.run(:raw_tags) do |c|
            @database.transaction(c) do
              rows = @database.select(c, :raw_tags, raw_tag_statements[:page])
              next NO_TAGS if rows.empty?

              ids = rows.map { |_id, tag| Dependencies.tag_id(tag) }.uniq.sort
              now = Entry.now
              ids.each do |id|
                @database.write(c, :raw_tags, log_statements.version_set, [id, SecureRandom.random_bytes(8).unpack1("Q<") & Dependencies::MASK])
                log(c, now, tag_id: id)
              end
              # Rows come in id order and nobody else writes during the transaction: these are the
              # rows read.
              @database.write(c, :raw_tags, raw_tag_statements[:handled], [rows.last[0]])
              ids
            end
          end
        rescue TierError
          # The migration's down may have dropped the table: then there is nothing to convert.
          @raw_tags = false
          @raw_tags_looked = nil
          raise if raw_tags?

          NO_TAGS
        end

        private

        # Whether the table is there (SQLite only), looked up at most once per LOOK_AGAIN while
        # it is not.
        def raw_tags?
          return true if @raw_tags
          return false unless @database.dialect.is_a?(Dialect::SQLite)

          now = Clock.monotonic
          return false if @raw_tags_looked && now - @raw_tags_looked < LOOK_AGAIN

          @raw_tags_looked = now
          @raw_tags = !@database.run(:raw_tags) do |c|
            @database.select(c, :raw_tags, raw_tag_statements[:exists], ["#{@table_name}#{SUFFIX}"])
          end.empty?
        end

        def raw_tag_statements
          @raw_tag_statements ||= begin
            table = @database.dialect.quote("#{@table_name}#{SUFFIX}")
            {
              exists: "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
              any: "SELECT id FROM #{table} LIMIT 1",
              page: "SELECT id, tag FROM #{table} ORDER BY id LIMIT #{PAGE}",
              handled: "DELETE FROM #{table} WHERE id <= ?"
            }.freeze
          end
        end
      end
    end
  end
end
