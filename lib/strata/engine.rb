# frozen_string_literal: true

require "strata"
require "strata/counters"
require "strata/failure_reports"
require "strata/meta/host_outages"
require "strata/poller"
require "strata/retries"
require "strata/stack"

module Strata
  # The house without Rails: the tiers a configuration names, the Stack over them, the host's
  # Counters, the Poller, the Retries of failed deletes, the memcached servers' host outages and
  # the FailureReports, built together and closed together. ActiveSupport::Cache::StrataStore
  # is one adapter over it: it turns Rails' entries and options into the stack's bytes and
  # calls the stack itself on its hot paths.
  #
  # Failures: every tier failure, wherever it happens (the stack, the poller's thread, the
  # retries, the outages' record, the adapter), goes to #report_failure, which counts it and,
  # once per outage of its kind (FailureReports), calls on_report with it.
  #
  # Thread safety: built once; what it holds is safe to use from many threads and processes.
  class Engine
    attr_reader :stack, :counters, :poller, :retries
    # The SQL tier when it joins the app's transactions and has tiers above it, else nil.
    attr_reader :app_sql

    # l1, memcached, sql: the tiers' options (Tiers::SharedMemory, Tiers::Memcached, Tiers::SQL).
    #   L1 is there when l1 is given, or when neither of the others is; its path defaults to
    #   SharedMemory.default_path(SharedMemory.default_name(namespace)).
    # fill_wait, coherence_interval: the Stack's. poll_interval, poll_listen: the Poller's
    #   interval and listen.
    # on_report: called as on_report.call(error, tier, held) for each failure told (held: the
    #   failures of its kind held back since it was last told); nil counts them only.
    def initialize(l1: nil, memcached: nil, sql: nil, namespace: nil, fill_wait: Stack::DEFAULT_FILL_WAIT,
      coherence_interval: Dependencies::DEFAULT_COHERENCE_INTERVAL, poll_interval: Poller::DEFAULT_INTERVAL,
      poll_listen: true, on_report: nil)
      @failures = FailureReports.new
      @on_report = on_report
      on_error = method(:report_failure)
      tiers = build_tiers(l1, memcached, sql, namespace)
      @counters = Counters.new(tiers[:l1]) # the host's, in L1's file; without L1 this process's
      polled = Poller.polls?(tiers.values)
      @stack = Stack.new(tiers, on_error: on_error, fill_wait: fill_wait, coherence_interval: coherence_interval, polled: polled,
        counters: @counters, host_ttl: host_ttl(tiers, coherence_interval, polled), undurable: method(:undurable))
      @retries = Retries.new(@stack, on_error: on_error)
      @app_sql = tiers[:l3] if tiers.size > 1 && tiers[:l3]&.app_connections?
      @poller = Poller.start(@stack, on_error: on_error, interval: poll_interval, listen: poll_listen)
      @outages = host_outages(tiers)
    end

    # The names of the tiers that can't list their keys (delete_matched needs every one to).
    def unlisted_tiers
      @stack.tier_names.reject { |name| @stack[name].capabilities[:listing] }
    end

    # Counts error (from tier, else error.tier) and tells on_report of it unless its outage was
    # told already (FailureReports). Every tier failure comes here.
    def report_failure(error, tier = nil)
      tier ||= error.tier if error.respond_to?(:tier)
      held = @failures.record(error, tier)
      @on_report&.call(error, tier, held) if held
    end

    # The tiers' statistics, the failure counts (FailureReports#stats) and the host's counters
    # (Counters#totals, with shared: false when there is no L1 table to keep them in and they
    # are this process's only).
    def stats
      {tiers: @stack.stats}.merge!(@failures.stats, counters: @counters.totals.merge!(shared: @counters.shared?))
    end

    # Stops the poller and the retries and releases the tiers. Nothing works afterwards.
    def close
      @poller&.stop
      @retries.stop
      @outages&.release(@stack[:l2].client.ring)
      @stack.close
    end

    private

    # The stack's undurable: keys whose write or delete the SQL tier missed, deleted there once
    # it answers (Retries).
    def undurable(keys)
      @retries.add_keys(keys)
    end

    # Top first. With no tier option given, l1's missing size is the error to report.
    # An L1 file or directory that is not safely this user's (another local user made it
    # first, say) leaves the engine without L1, reported once, when another tier can serve:
    # an app must not fail to boot over another user's file. With L1 alone it raises.
    def build_tiers(l1, memcached, sql, namespace)
      tiers = {}
      if l1 || !(memcached || sql)
        begin
          tiers[:l1] = build_l1(l1 || {}, namespace)
        rescue UnsafeFileError => error
          raise unless memcached || sql

          report_failure(error, :l1)
        end
      end
      tiers[:l2] = build_memcached(memcached) if memcached
      tiers[:l3] = build_sql(sql) if sql
      tiers
    end

    # The cap on L1's TTLs (Stack's host_ttl): coherence_interval when L1 sits above memcached,
    # where other hosts write, and no poller tells this host of their writes. With a poller,
    # Dependencies::POLLED_TTL, as for its copies of tag versions: the bound for a change the
    # poller could not see (its row committed more than gap_timeout after it was appended).
    # Else none: L1 alone or over an SQL tier of this host alone has no other host.
    def host_ttl(tiers, coherence_interval, polled)
      return nil unless tiers.key?(:l1)
      return Dependencies::POLLED_TTL if polled

      coherence_interval if tiers.key?(:l2)
    end

    # With L1 and memcached: the host's record of the memcached servers this process marks
    # down (Meta::HostOutages, in L1), which `strata stats` shows; its failures are reported as
    # L1's. Without L1 a server's down since stays this process's.
    def host_outages(tiers)
      return nil unless tiers[:l1] && tiers[:l2]

      outages = Meta::HostOutages.new(tiers[:l1], on_error: method(:report_failure))
      tiers[:l2].client.ring.watcher = outages
      outages
    end

    # Active Record is loaded only for an engine with an SQL tier.
    def build_sql(options)
      raise ArgumentError, "StrataStore needs sql: {path: \"file.sqlite3\"} or sql: {connection_class: SomeRecord}" unless options.is_a?(Hash)

      require "strata/tiers/sql"
      Tiers::SQL.new(**options)
    end

    def build_memcached(options)
      raise ArgumentError, "StrataStore needs memcached: {servers: [\"host:port\", ...]}" unless options.is_a?(Hash) && options[:servers]

      Tiers::Memcached.new(**options)
    end

    def build_l1(options, namespace)
      options = options.dup
      options[:path] ||= Tiers::SharedMemory.default_path(Tiers::SharedMemory.default_name(namespace))
      raise ArgumentError, "StrataStore needs l1: {size: bytes} for its shared-memory table" unless options[:size]

      Tiers::SharedMemory.new(**options)
    end
  end
end
