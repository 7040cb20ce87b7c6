# frozen_string_literal: true

module Strata
  module CLI
    # The SQL tier's table, through Tiers::SQL (its #stats: rows and bytes; #log_head) plus
    # counts of its own (tombstones, the versions and log tables' rows) on the tier's
    # connection class. Given the store's sql: options: path: (an SQLite file, which must
    # exist: stats never creates one), connection_class:, or url: (a database URL, connected
    # through an abstract Active Record class made here). The tier's own counters (its #stats:
    # hits, sets, expiry passes ...) are this process's, zero here, and left out: the host's
    # (reads, writes, expiry passes, rows expired and evicted) are in the L1 table's counters,
    # which Stats adds.
    class SQLTable
      def initialize(options)
        @options = options
        @tier = nil
        @record = nil
      end

      def stats
        tier = open_tier
        totals = tier.stats
        {source: source, table: tier.table_name, rows: totals[:entries], bytes: totals[:bytes],
         tombstones: count(tier, tier.table_name, "expires_at < 0"),
         versions_rows: count(tier, "#{tier.table_name}_versions"), log_rows: count(tier, "#{tier.table_name}_log"),
         log_head: tier.log_head}.merge(totals.slice(:max_size, :max_entries, :max_age))
      end

      def close
        @tier&.close
        @record&.remove_connection
        @tier = @record = nil
      end

      # Where the table is: the SQLite file, the URL without credentials, or the class's name.
      def source
        if @options[:path] then "sqlite3:#{File.expand_path(@options[:path].to_s)}"
        elsif @options[:url] then @options[:url].to_s.sub(%r{//[^@/]*@}, "//")
        else @options[:connection_class].to_s
        end
      end

      private

      def open_tier
        return @tier if @tier

        require "strata/tiers/sql"
        options = @options.slice(:table_name)
        if @options[:path]
          path = File.expand_path(@options[:path].to_s)
          raise Strata::TierError.new("#{path}: no such file", tier: :l3) unless File.file?(path)

          options[:path] = path
        else
          options[:connection_class] = @options[:connection_class] || connection_class_for(@options[:url])
        end
        @tier = Strata::Tiers::SQL.new(**options)
      end

      # Active Record keys pools by class name and refuses anonymous classes (see SQL::Embedded).
      def connection_class_for(url)
        raise ArgumentError, "sql: needs path:, url: or connection_class:" unless url

        record = Class.new(ActiveRecord::Base)
        record.define_singleton_method(:name) { "Strata::CLI::SQLTable(#{object_id})" }
        record.abstract_class = true
        record.establish_connection(url.to_s)
        @record = record
      end

      def count(tier, table, where = nil)
        tier.connection_class.connection_pool.with_connection do |c|
          c.select_value("SELECT COUNT(*) FROM #{c.quote_table_name(table)}#{" WHERE #{where}" if where}").to_i
        end
      end
    end
  end
end
