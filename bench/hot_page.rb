# frozen_string_literal: true

require_relative "children"
require_relative "format"
require_relative "text_table"

module Strata
  module Bench
    # A hot page through a hard and a soft invalidation (docs/coherence.md, "Soft invalidation"):
    # HOSTS hosts (an L1 file each) of WORKERS processes each, over one SQLite file with the log
    # (and memcached when one answers), fetch one tagged entry in a loop; its block reads the
    # page's generation from a file and takes compute_ms. After a quiet second, this process (a
    # process of host 0) moves the generation on and invalidates the tag, hard in one run, soft
    # in the other. Per run: the block's runs in the second after the invalidation, the fetches'
    # latency in that second against the quiet one, and when every host last answered the old
    # generation. Goals, soft: one run of the block per claim scope (the cluster with memcached,
    # else each host), p99 within 1.2x the quiet second's, every host on the new page within the
    # block's time plus the poll interval.
    class HotPageReport
      DEFAULTS = {hosts: 2, workers: 4, compute_ms: 20, quiet: 1.0, after: 1.0}.freeze
      QUICK = {workers: 2, quiet: 0.5, after: 0.5}.freeze
      KEY = "bench:hot_page"
      P99_GOAL = 1.2
      # A fetch slower than this many ms waited (on the block, or on another caller's).
      SLOW_MS = 5
      POLL_INTERVAL = 0.05
      # Seconds the stores get to open (and their pollers to start) before the workers begin,
      # and seconds the workers fetch before the quiet second (their first fetches connect).
      START = 1.5
      WARMUP = 0.5
      # Seconds a worker may take past the run before it is killed.
      DEADLINE = 20
      # A worker's fetches at most, whatever the seconds.
      MAX_FETCHES = 200_000
      # Seconds between a worker's fetches: the poller's thread and the filling process get
      # Ruby's GVL and the cores.
      PAUSE = 0.0005

      def initialize(env, quick: false, **options)
        @env = env
        @options = DEFAULTS.merge(options.slice(*DEFAULTS.keys))
        @options.merge!(QUICK) if quick
      end

      # A Hash for the JSON report (string keys); ::lines renders it.
      def run
        memcached = @env.memcached_unreachable_reason ? nil : @env.memcached_servers
        warm_up(memcached)
        runs = %w[hard soft].to_h { |mode| [mode, measure(mode == "soft", memcached)] }
        {"hosts" => @options[:hosts], "workers" => @options[:workers], "compute_ms" => @options[:compute_ms],
         "memcached" => !memcached.nil?, "goal_computations" => memcached ? 1 : @options[:hosts],
         "goal_converge_ms" => (@options[:compute_ms] + POLL_INTERVAL * 1000).round, "runs" => runs}
      end

      def self.lines(section)
        hard, soft = section["runs"].values_at("hard", "soft")
        ms = ->(run, key) { run["error"] ? "failed" : "#{Format.significant(run[key])} ms" }
        met = ->(ok) { ok ? "met" : "not met" }
        rows = [
          ["block runs after the invalidation", hard["computations"].to_s, soft["computations"].to_s,
            "#{section["goal_computations"]} (soft)", met[soft["computations"] == section["goal_computations"]]],
          ["p50 quiet / after", "#{ms[hard, "quiet_p50_ms"]} / #{ms[hard, "after_p50_ms"]}",
            "#{ms[soft, "quiet_p50_ms"]} / #{ms[soft, "after_p50_ms"]}", "", ""],
          ["p99 quiet / after", "#{ms[hard, "quiet_p99_ms"]} / #{ms[hard, "after_p99_ms"]}",
            "#{ms[soft, "quiet_p99_ms"]} / #{ms[soft, "after_p99_ms"]}", "after <= #{P99_GOAL}x quiet (soft)",
            met[!soft["error"] && soft["after_p99_ms"] <= soft["quiet_p99_ms"] * P99_GOAL]],
          ["max quiet / after", "#{ms[hard, "quiet_max_ms"]} / #{ms[hard, "after_max_ms"]}",
            "#{ms[soft, "quiet_max_ms"]} / #{ms[soft, "after_max_ms"]}", "", ""],
          ["fetches over #{SLOW_MS} ms quiet / after", "#{hard["quiet_slow"]} / #{hard["after_slow"]}",
            "#{soft["quiet_slow"]} / #{soft["after_slow"]}", "", ""],
          ["every host on the new page after", ms[hard, "converge_ms"], ms[soft, "converge_ms"],
            "<= #{section["goal_converge_ms"]} ms", met[!soft["error"] && soft["converge_ms"] <= section["goal_converge_ms"]]]
        ]
        layout = section["memcached"] ? "L1 + memcached + SQLite" : "L1 + SQLite"
        ["hot page: #{section["hosts"]} hosts x #{section["workers"]} processes fetching one tagged entry " \
          "(#{section["compute_ms"]} ms to compute; #{layout}), then invalidate_tags hard and soft",
          TextTable.render(["", "hard", "soft", "goal", "verdict"], rows).gsub(/^/, "  ")]
      end

      private

      # One run: workers forked, the quiet second, the invalidation, the second after.
      def measure(soft, memcached)
        sql = {path: @env.disk_path("hot-page", ext: "sqlite3"), invalidation_log: true}
        l1_paths = Array.new(@options[:hosts]) { |host| @env.table_path("hot-page-#{host}") }
        # A namespace and a tag of the run's own: memcached outlives it, and keeps tag versions
        # for every namespace.
        @namespace = "hot-page-#{@env.nonce}-#{soft ? "soft" : "hard"}"
        @tag = "#{@namespace}:tag"
        generation = File.join(@env.dir, "hot-page-generation-#{soft}")
        File.write(generation, "0")
        start_at = clock + START
        invalidate_at = start_at + WARMUP + @options[:quiet]
        stop_at = invalidate_at + @options[:after]
        # Forked before this process opens its store: no SQLite connection crosses a fork.
        workers = l1_paths.each_with_index.flat_map do |path, host|
          Array.new(@options[:workers]) do |index|
            out = File.join(@env.dir, "hot-page-#{soft}-#{host}-#{index}")
            [host, out, fork { worker(path, sql, memcached, generation, start_at, stop_at, out) }]
          end
        end
        own = store(l1_paths[0], sql, memcached)
        own.fetch(KEY, tags: [@tag]) { "page 0" } # before the workers start, unless they are slow to open
        sleep([invalidate_at - clock, 0].max)
        File.write(generation, "1")
        invalidated = clock
        soft ? own.invalidate_tags(@tag, soft: true) : own.invalidate_tags(@tag)
        workers.each { |_, _, pid| Children.reap(pid, stop_at + DEADLINE) }
        figures(workers.map { |host, out, _| [host, Marshal.load(File.binread(out))] }, invalidated) # rubocop:disable Security/MarshalLoad -- the run's own file
      rescue => e
        {"error" => Format.error(e)}
      ensure
        own&.close
        l1_paths&.each { |path| @env.remove_table(path) }
        FileUtils.rm_f(Dir.glob("#{sql[:path]}*")) if sql
      end

      # Loads what a store uses (the tiers' code, the SQLite driver) once, in this process, so that
      # the forked workers do not each load it while the first run's quiet second goes by.
      def warm_up(memcached)
        @namespace = "hot-page-#{@env.nonce}-warm-up"
        sql = {path: @env.disk_path("hot-page-warm-up", ext: "sqlite3"), invalidation_log: true}
        path = @env.table_path("hot-page-warm-up")
        cache = store(path, sql, memcached)
        cache.fetch(KEY, tags: [@namespace]) { "page" }
        cache.invalidate_tags(@namespace, soft: true)
        cache.fetch(KEY, tags: [@namespace]) { "page" }
      ensure
        cache&.close
        @env.remove_table(path)
        FileUtils.rm_f(Dir.glob("#{sql[:path]}*"))
      end

      # A worker process: fetches until stop_at, then writes its samples ([began, seconds,
      # generation answered] per fetch) and the times its block began to out.
      def worker(l1_path, sql, memcached, generation, start_at, stop_at, out)
        cache = store(l1_path, sql, memcached)
        samples = []
        computed = []
        sleep([start_at - clock, 0].max)
        MAX_FETCHES.times do
          break if (began = clock) > stop_at

          value = cache.fetch(KEY, tags: [@tag]) do
            computed << clock
            page = "page #{File.read(generation)}"
            sleep(@options[:compute_ms] / 1000.0)
            page
          end
          samples << [began, clock - began, Integer(value.delete_prefix("page "))]
          sleep(PAUSE)
        end
        File.binwrite(out, Marshal.dump({samples: samples, computed: computed}))
        cache.close
        exit!(0)
      rescue => e
        warn "hot page worker: #{Format.error(e)}"
        exit!(1)
      end

      def figures(results, invalidated)
        quiet = []
        after = []
        computations = 0
        last_old = Hash.new(invalidated)
        results.each do |host, result|
          computations += result[:computed].count { |at| at >= invalidated }
          result[:samples].each do |began, seconds, generation|
            if began < invalidated
              quiet << seconds if began >= invalidated - @options[:quiet]
              next
            end
            after << seconds
            last_old[host] = [last_old[host], began + seconds].max if generation.zero?
          end
        end
        raise "no fetch in the quiet second or after it" if quiet.empty? || after.empty?

        quiet.sort!
        after.sort!
        slow = SLOW_MS / 1000.0
        {"computations" => computations, "fetches_quiet" => quiet.size, "fetches_after" => after.size,
         "quiet_slow" => quiet.count { |seconds| seconds > slow }, "after_slow" => after.count { |seconds| seconds > slow },
         "quiet_p50_ms" => ms(quiet, 0.5), "quiet_p99_ms" => ms(quiet, 0.99), "quiet_max_ms" => ms(quiet, 1.0),
         "after_p50_ms" => ms(after, 0.5), "after_p99_ms" => ms(after, 0.99), "after_max_ms" => ms(after, 1.0),
         "converge_ms" => ((last_old.values.max || invalidated) - invalidated).then { |s| (s * 1000).round(1) }}
      end

      def ms(sorted, fraction)
        (sorted[[(sorted.size * fraction).ceil - 1, 0].max] * 1000).round(2)
      end

      def store(l1_path, sql, memcached)
        options = {namespace: @namespace, l1: {path: l1_path, size: 16 << 20}, sql: sql, poll_interval: POLL_INTERVAL}
        options[:memcached] = {servers: memcached} if memcached
        ActiveSupport::Cache::StrataStore.new(**options)
      end

      def clock
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end
    end
  end
end
