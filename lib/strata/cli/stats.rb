# frozen_string_literal: true

require "json"
require "time"
require "strata"
require "strata/counters"
require "strata/cli/options"
require "strata/cli/config"
require "strata/cli/l1_table"
require "strata/cli/memcached_servers"
require "strata/cli/sql_table"
require "strata/cli/text_report"

module Strata
  module CLI
    # `strata stats`: a host's cache figures read from outside the app (docs/operations.md).
    # Each refresh asks every configured tier afresh; a tier that can't be read shows its error
    # in its place and the others are still shown.
    class Stats
      INTERVAL = 1 # seconds between refreshes with --watch

      # Exit status: 0 after printing, 1 for a config file that can't be used or when no tier
      # could be read (the last snapshot's), 2 for bad usage.
      def self.run(argv, out: $stdout, err: $stderr)
        options = Options.new(argv)
        config = options.config ? Config.from_file(options.config) : Config.from_path(options.path)
        new(config, out: out, interval: options.interval || INTERVAL).run(watch: options.watch, count: options.count, json: options.json)
      rescue OptionParser::ParseError => e
        err.puts("strata stats: #{e.message}", Options::USAGE)
        2
      rescue StandardError, ScriptError => e # a config file that fails to load or names bad options
        err.puts("strata stats: #{e.class}: #{e.message}")
        1
      end

      def initialize(config, out:, interval: INTERVAL)
        @out = out
        @interval = interval
        @l1 = config.l1_path && L1Table.new(config.l1_path)
        @memcached = config.memcached && MemcachedServers.new(config.memcached[:servers])
        @sql = config.sql && SQLTable.new(config.sql)
      end

      # Prints one snapshot, or with watch: one per interval until count of them (nil: until
      # interrupted). The exit status: 1 when the last snapshot printed read no tier at all
      # (each showed an error), else 0.
      def run(watch:, count:, json:)
        printed = 0
        begin
          loop do
            print_snapshot(json, watch)
            printed += 1
            break if !watch || (count && printed >= count)

            sleep(@interval)
          end
        rescue Interrupt
          nil
        ensure
          @sql&.close
        end
        @none_read ? 1 : 0
      end

      # {time:, l1: {...}, memcached: [{...}, ...], sql: {...}}, a key per configured tier, and
      # with an L1 table the host's counters (docs/operations.md, "The host's counters"): a
      # counters object in l1 and sql, memcached_counters beside the memcached servers (a list),
      # and store: the store's own figures; and, in the entry of each memcached server that some
      # process of the host considers down, down_since and down_marked_by (its pid).
      def snapshot
        result = {time: Time.now.utc.iso8601}
        l1 = guarded(path: @l1.path) { @l1.stats(memcached: @memcached ? @memcached.names : []) } if @l1
        host = l1&.delete(:host_counters)
        outages = l1&.delete(:host_outages)
        result[:l1] = l1 if l1
        result[:memcached] = with_outages(@memcached.stats, outages) if @memcached
        result[:sql] = guarded(source: @sql.source) { @sql.stats } if @sql
        add_counters(result, host) if host
        result
      end

      private

      def print_snapshot(json, watch)
        figures = snapshot
        tiers = [figures[:l1], figures[:sql], *figures[:memcached]].compact
        @none_read = !tiers.empty? && tiers.all? { |tier| tier.is_a?(Hash) && tier[:error] }
        if json
          @out.puts(JSON.generate(figures))
        else
          @out.print("\e[H\e[2J") if watch && @out.tty?
          @out.print(TextReport.new(figures).to_s)
        end
        @out.flush
      end

      # The host's counters into the snapshot: each configured tier's beside its figures, the
      # store's with the hit ratio of its reads (read hits over read hits and fetch misses).
      def add_counters(result, host)
        tiers = host[:tiers]
        result[:l1][:counters] = tiers[:l1]
        result[:memcached_counters] = tiers[:memcached] if result.key?(:memcached)
        result[:sql][:counters] = tiers[:sql] if result.key?(:sql)
        store = host[:store]
        operations = store[:operations]
        hits = operations[:read_hit][:count]
        result[:store] = store.merge(hit_ratio: Strata::Counters.ratio(hits, hits + operations[:fetch_miss][:count]))
      end

      # servers (MemcachedServers#stats) with each one's record of an outage, when there is one.
      def with_outages(servers, outages)
        return servers unless outages&.any?

        servers.zip(@memcached.names).map { |server, name| outages[name] ? server.merge(outages[name]) : server }
      end

      def guarded(context)
        yield
      rescue => e # whatever stops one tier from answering is shown in its place
        context.merge(error: e.is_a?(L1Table::Refused) ? e.message : "#{e.class}: #{e.message}")
      end
    end
  end
end
