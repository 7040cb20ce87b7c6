# frozen_string_literal: true

require "securerandom"
require_relative "children"
require_relative "format"
require_relative "stores"
require_relative "text_table"

module Strata
  module Bench
    # Cross-host staleness after invalidate_tags (issue 22, docs/coherence.md): two processes
    # with L1 files of their own share an SQL tier that writes the invalidation log. In each
    # round host B (a forked child) writes an entry tagged with a fresh tag and reads it (its L1
    # holds it), then spins on reads; host A (this process) calls invalidate_tags on the tag and
    # notes the monotonic time it returned (committed); B notes when its read first misses. The
    # difference is the staleness: the poller's delay, since both keep tag versions for a minute
    # (coherence_interval) and nothing else would make B miss. Layouts: the embedded SQLite file
    # with the log on; with STRATA_POSTGRES_URL set, PostgreSQL with NOTIFY and without.
    # Goal: p99 at most TARGET_MS with the default poll interval.
    class CrossHostStaleness
      TARGET_MS = 100
      DEFAULTS = {rounds: 80}.freeze
      QUICK_ROUNDS = 20
      # Seconds B spins for one miss, or for its poller's first round, before the run fails.
      DEADLINE = 10
      STORE_OPTIONS = {coherence_interval: 60}.freeze
      # Seconds host B sleeps between two reads: the resolution of the figures.
      SPIN_SLEEP = 0.0005
      # At most this many seconds, at random, pass between B arming a round and A's
      # invalidate_tags: else every invalidation would come at the same point of the poller's
      # interval (just after the round that saw B's previous miss), and time that point only.
      JITTER = 0.1

      def initialize(env, quick: false, **options)
        @env = env
        @rounds = quick ? QUICK_ROUNDS : DEFAULTS.merge(options.slice(*DEFAULTS.keys))[:rounds]
      end

      # A Hash for the JSON report (string keys); ::lines renders it.
      def run
        {"rounds" => @rounds, "target_p99_ms" => TARGET_MS, "layouts" => layouts.map { |label, sql, options| measure(label, sql, options) }}
      end

      def self.lines(section)
        rows = section["layouts"].map do |l|
          next [l["layout"], "failed: #{l["error"]}", "", ""] if l["error"]

          [l["layout"], "#{Format.significant(l["p50_ms"])} ms", "#{Format.significant(l["p99_ms"])} ms",
            (l["p99_ms"] <= section["target_p99_ms"]) ? "met" : "not met"]
        end
        ["cross-host staleness (invalidate_tags on host A committed, until host B's read misses; " \
          "#{section["rounds"]} rounds, default poll interval; goal p99 at most #{section["target_p99_ms"]} ms)",
          TextTable.render(["SQL tier", "p50", "p99", "verdict"], rows).gsub(/^/, "  ")]
      end

      private

      # [label, sql: option, more store options] per layout.
      def layouts
        sqlite = {path: @env.table_path("staleness", ext: "sqlite3"), invalidation_log: true}
        list = [["SQLite file, log on", sqlite, {}]]
        url = ENV["STRATA_POSTGRES_URL"].to_s
        return list if url.empty?

        record = postgres_record(url)
        list + [["PostgreSQL, NOTIFY", {connection_class: record}, {}],
          ["PostgreSQL, NOTIFY off", {connection_class: record}, {poll_listen: false}]]
      end

      # An abstract Active Record class connected to url, made on first use (Active Record is
      # loaded only for a run that reaches here).
      def postgres_record(url)
        require "strata/tiers/sql"
        unless self.class.const_defined?(:Record, false)
          self.class.const_set(:Record, Class.new(ActiveRecord::Base) { self.abstract_class = true })
          self.class::Record.establish_connection(url)
        end
        self.class::Record
      end

      def measure(label, sql, options)
        sql = with_table(sql)
        b_input, to_b = IO.pipe
        from_b, b_output = IO.pipe
        # The child closes its copies of A's ends: else host B would hold its own input open, see
        # no end of it when A is done, and be killed after DEADLINE.
        pid = fork do
          [to_b, from_b].each(&:close)
          host_b(sql, options, b_input, b_output)
        end
        [b_input, b_output].each(&:close)
        a = store("a", sql, options)
        random = Random.new(22)
        samples = Array.new(@rounds) do |round|
          tag = "bench:staleness:#{@env.nonce}:#{round}"
          to_b.puts(tag)
          to_b.flush
          raise "host B failed" unless from_b.gets&.chomp == "armed"

          sleep(random.rand * JITTER)
          a.invalidate_tags(tag)
          to_b.puts(Process.clock_gettime(Process::CLOCK_MONOTONIC).to_s)
          to_b.flush
          Float(from_b.gets || raise("host B failed"))
        end
        sorted = samples.sort
        {"layout" => label, "p50_ms" => (sorted[sorted.size / 2] * 1000).round(2),
         "p99_ms" => (sorted[(sorted.size * 0.99).ceil - 1] * 1000).round(2), "max_ms" => (sorted.last * 1000).round(2)}
      rescue => e
        {"layout" => label, "error" => Format.error(e)}
      ensure
        to_b&.close # host B's input ends: it exits
        Children.reap(pid, Process.clock_gettime(Process::CLOCK_MONOTONIC) + DEADLINE) if pid
        a&.close
        drop_table(sql)
      end

      # Host B: its own store; per round, an armed entry, then spinning reads until it misses.
      # Prints "armed" and then the staleness in seconds.
      def host_b(sql, options, input, output)
        b = store("b", sql, options)
        poller = b.engine.poller
        spin(DEADLINE) { poller.last_seen }
        while (tag = input.gets&.chomp)
          key = "bench:staleness:#{tag}"
          b.write(key, "v", tags: [tag])
          raise "host B's write was not stored" unless b.read(key) == "v"

          output.puts("armed")
          output.flush
          missed = spin(DEADLINE) { b.read(key).nil? && Process.clock_gettime(Process::CLOCK_MONOTONIC) }
          committed = Float(input.gets)
          output.puts(missed - committed)
          output.flush
        end
        exit!(0)
      rescue => e
        warn "staleness host B: #{Format.error(e)}"
        exit!(1)
      end

      # The block's first truthy value, asked every SPIN_SLEEP for up to seconds. The sleep lets
      # the poller's thread have Ruby's GVL at once: a loop that never lets go of it would hold
      # the thread back for a whole time slice (100 ms), and time the GVL rather than the poller.
      def spin(seconds)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
        loop do # bound: seconds
          value = yield
          return value if value
          raise "nothing within #{seconds} s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

          sleep(SPIN_SLEEP)
        end
      end

      def store(name, sql, options)
        l1 = {path: @env.table_path("staleness-#{name}"), size: 16 << 20}
        ActiveSupport::Cache::StrataStore.new(l1: l1, sql: sql, **STORE_OPTIONS, **options)
      end

      # sql with a table of its own on PostgreSQL (made here, dropped by #drop_table).
      def with_table(sql)
        return sql unless sql[:connection_class]

        table = "strata_staleness_#{SecureRandom.hex(4)}"
        Strata::Tiers::SQL.create_table!(sql[:connection_class], table_name: table)
        sql.merge(table_name: table)
      end

      def drop_table(sql)
        return unless sql && sql[:table_name]

        sql[:connection_class].connection_pool.with_connection do |c|
          [sql[:table_name], "#{sql[:table_name]}_versions", "#{sql[:table_name]}_log"].each { |t| c.drop_table(t, if_exists: true) }
        end
      end
    end
  end
end
