# frozen_string_literal: true

require "pg"
require "securerandom"
require "active_record"
require "active_support/cache/strata_store"
require "strata/tiers/sql"
require "support/child_processes"
require "support/memcached_process"
require "support/tcp_proxy"

module Strata
  module TestSupport
    # A randomized run of the ordering rule (docs/coherence.md): HOSTS processes, each with an L1
    # file of its own, share a memcached of the run's own (each host through a TcpProxy, whose
    # added latency the run changes at random, 0-10 ms) and PostgreSQL (the SQL tier with the
    # log, woken by NOTIFY). The data the cache holds copies of is a table of the run's own,
    # "truth": a version per key.
    #
    # Each host runs one loop, for the run's seconds. On a key it owns (every HOSTS-th) it may
    # change the truth (the version up by one, committed) and then tell the cache, as an app
    # does: write the new value, or delete the key, or, for a tagged key, invalidate_tags its
    # tag; the moment that call returned is the change's acknowledgement. Otherwise it reads a
    # key: a fetch whose block reads the truth slowly (up to SLOW_FILL_MS more), or a plain read.
    # Host 0 has a second process on its L1 file (a worker, as Puma runs several) that only
    # fetches, with slower blocks (up to WORKER_FILL_MS). Meanwhile the run changes the proxies'
    # latency at random, and in the second half of the run also cuts one host's path to
    # memcached, or stops memcached (SIGSTOP), for a moment, or kills the worker (kill -9,
    # often mid-fill: its host lock, lease and any L1 write in progress are left) and
    # starts another.
    #
    # A value served is stale when a change of its key to a later version was acknowledged more
    # than the bound before the read began (the worker's reads are not judged). Stale answers
    # are counted past each of BOUNDS outside the faults (a read that began during a fault or
    # within FAULT_GRACE after it is counted apart: the bound there is the fault's own,
    # memcached's return plus the poller's retry). Those are figures of time, which a loaded
    # machine stretches (a poller thread not scheduled). What the run holds to is the order
    # (docs/coherence.md, "The ordering rule"): out of order is a read that returned an older
    # version though it began after the change's acknowledgement on the changing host (a
    # change made outside the faults), or after the end of a whole round of the reading host's
    # poller (it held the election, settled every key and vouched) that began after the
    # acknowledgement: the bound on other hosts, and on the changing one for a change made
    # during a fault (memcached missed it; the pollers settle it from the log). Each poller
    # journals its whole rounds to a file per host (RoundJournal). The rule's second clause is
    # kept apart: a copy read from SQL before a change and stored in memcached after it (by a
    # fill or a plain read's backfill) is taken back and announced with a key row; a read of the
    # key on a host before that row reached it (a whole round after the announcement) is
    # counted as taken_back, not out of order. Every process journals its announcements
    # (AnnounceJournal). At the end each host waits, at least QUIET seconds, for a whole round
    # of its poller that began after every host's changes ended, and reads every key: any value
    # older than the truth's is stale for good.
    #
    # Every loop is bounded in count and time; the run stops its processes and removes its
    # tables, memcached and files, also when it fails.
    class CoherenceRun
      HOSTS = 3
      KEYS = 12
      # Of a host's operations on keys it owns, the share that are changes.
      CHANGE_SHARE = 0.4
      SLOW_FILL_MS = 5
      WORKER_FILL_MS = 20
      MAX_DELAY_MS = 10
      FAULT_GRACE = 2.0
      QUIET = 2.0
      # A host's loop runs at most this many operations, whatever the seconds.
      MAX_OPS = 200_000
      # Seconds a host may take beyond the run before it is killed.
      DEADLINE = 60
      BOUNDS = [0.05, 0.1, 0.5].freeze

      # Seconds a host waits at the end for a whole round of its poller that began after the
      # changes ended.
      SETTLE_DEADLINE = 30

      # stale: bound (seconds) => stale answers past it outside the faults; worst_ms: the latest
      # of those (ms past the next version's acknowledgement); errors: hosts that failed, and
      # exceptions a host's calls raised (the store is to raise none).
      # worst_in_faults_ms: the latest stale answer during the faults (their bounds are their
      # own: memcached's return plus the poller's retry, or a killed poller holder's lease).
      # out_of_order: reads that returned an older version after the change reached their host
      # (on the changing host: its acknowledgement; elsewhere: a whole poller round after it),
      # faults or not (out_of_order_examples: the first 3); taken_back: such reads of a key
      # that a copy's take-back announced meanwhile, before the announcement reached the reading
      # host (the rule's second clause); rounds: whole poller rounds journaled,
      # per host; final_stale_examples: the first 3 stale final reads, with the versions each
      # tier of their host held then.
      Result = Struct.new(:seconds, :reads, :changes, :faults, :stale, :worst_ms, :stale_in_faults, :worst_in_faults_ms,
        :out_of_order, :out_of_order_examples, :taken_back, :rounds, :final_reads, :final_stale, :final_stale_examples, :errors, keyword_init: true)

      # Prepended to a host process's poller: appends "began ended" (monotonic seconds) to the
      # host's rounds file for each round that held the election and vouched for L1 (every row
      # read applied, every key settled, no page left). O_APPEND lines: the host's processes
      # share the file, and a killed one loses no line written.
      module RoundJournal
        attr_writer :round_journal

        def round
          @vouched = false
          began = Clock.monotonic
          more = super
          @round_journal.syswrite(format("%.6f %.6f\n", began, Clock.monotonic)) if @vouched && !more
          more
        end

        private

        def vouch(now)
          @vouched = true
          super
        end
      end

      # Prepended to Strata::Copies in a host's process: appends "key at" (monotonic seconds,
      # once the key row committed) to the run's announcements file for each key a take-back
      # announced (Copies#announce). Copies are frozen: the file is the module's.
      module AnnounceJournal
        class << self
          attr_accessor :file
        end

        private

        def announce(keys)
          result = super
          at = format("%.6f", Clock.monotonic)
          AnnounceJournal.file&.syswrite(keys.map { |key| "#{key} #{at}\n" }.join)
          result
        end
      end

      # record_class: an abstract Active Record class, connected by the run to url (PostgreSQL).
      # dir: where the L1 files and journals go. seed: for the hosts and the faults.
      def initialize(record_class:, url:, dir:, seconds:, seed:, bound: 0.5)
        @record_class = record_class
        @url = url
        @dir = dir
        @seconds = seconds
        @seed = seed
        @bound = bound
        @name = "strata_run_#{SecureRandom.hex(4)}"
      end

      def run
        @record_class.establish_connection(@url)
        Tiers::SQL.create_table!(@record_class, table_name: @name)
        truth { |c| c.exec("CREATE TABLE #{truth_table} (k text PRIMARY KEY, ver bigint NOT NULL)") }
        truth { |c| KEYS.times { |i| c.exec_params("INSERT INTO #{truth_table} VALUES ($1, 0)", [key(i)]) } }
        @memcached = MemcachedProcess.new.start
        host, port = @memcached.server.split(":")
        @proxies = Array.new(HOSTS) { TcpProxy.new(host, Integer(port)) }
        start_at = Clock.monotonic + 3 # the hosts' stores and pollers start meanwhile
        pids = Array.new(HOSTS) { |index| ChildProcesses.fork_child { host_loop(index, start_at) } }
        @worker = start_worker(start_at)
        faults = inject_faults(start_at)
        ChildProcesses.reap(@worker, DEADLINE) || ChildProcesses.kill_and_reap(@worker, 5)
        statuses = pids.map { |pid| ChildProcesses.reap(pid, @seconds + SETTLE_DEADLINE + DEADLINE) || ChildProcesses.kill_and_reap(pid, 5) }
        failed = statuses.each_with_index.reject { |status, _| status&.success? }.map { |status, index| "host #{index}: #{status.inspect}" }
        judge(faults, failed)
      ensure
        pids&.each { |pid| ChildProcesses.kill_and_reap(pid, 5) }
        ChildProcesses.kill_and_reap(@worker, 5) if @worker
        @proxies&.each(&:close)
        @memcached&.kill
        drop_tables
      end

      private

      def key(index)
        "k#{index}"
      end

      def truth_table
        "#{@name}_truth"
      end

      def truth
        connection = PG.connect(@url)
        yield connection
      ensure
        connection&.close
      end

      def tagged?(index)
        index % 3 == 2
      end

      def owner(index)
        index % HOSTS
      end

      def store(index)
        ActiveSupport::Cache::StrataStore.new(namespace: @name,
          l1: {path: File.join(@dir, "host-#{index}.l1"), size: 8 << 20},
          memcached: {servers: [@proxies[index].address], timeout: 0.25},
          sql: {connection_class: @record_class, table_name: @name})
      end

      def rounds_path(index)
        File.join(@dir, "rounds-#{index}")
      end

      # The store of host index's process, its poller journaling its whole rounds and its
      # take-backs their announcements.
      def journaled_store(index)
        Strata::Copies.prepend(AnnounceJournal) # in this process only: it is a child of the run's
        AnnounceJournal.file = File.open(announces_path, "a")
        cache = store(index)
        poller = cache.engine.poller
        poller.singleton_class.prepend(RoundJournal)
        poller.round_journal = File.open(rounds_path(index), "a")
        [cache, poller]
      end

      def announces_path
        File.join(@dir, "announces")
      end

      # name => [at, ...] of the announcements journaled (see AnnounceJournal).
      def announces
        return {} unless File.exist?(announces_path)

        File.readlines(announces_path).filter_map { |line|
          key, at = line.split
          at = Float(at, exception: false)
          [key[/k\d+\z/], at] if key && at
        }.group_by(&:first).transform_values { |pairs| pairs.map(&:last) }
      end

      # [[began, ended], ...] of the whole rounds host index's pollers journaled so far.
      def rounds(index)
        return [] unless File.exist?(rounds_path(index))

        File.readlines(rounds_path(index)).filter_map do |line|
          began, ended = line.split.map { |field| Float(field, exception: false) }
          [began, ended] if began && ended
        end
      end

      # Waits (at least QUIET, at most SETTLE_DEADLINE seconds) for a whole round of the host's
      # poller that began after every host's loop ended.
      def settle(index, loops_ended)
        sleep [loops_ended + QUIET - Clock.monotonic, 0].max
        settled = loops_ended + SETTLE_DEADLINE
        # Bound: SETTLE_DEADLINE / 0.05 looks.
        sleep 0.05 until Clock.monotonic > settled || rounds(index).any? { |began, _| began > loops_ended }
      end

      # One host's process: its loop, then the final sweep, then its journal to a file.
      def host_loop(index, start_at)
        cache, poller = journaled_store(index)
        sleep 0.01 until poller.last_seen || Clock.monotonic > start_at # bound: until start_at
        rng = Random.new(@seed * 31 + index)
        journal = {reads: [], acks: [], finals: [], errors: 0}
        sleep [start_at - Clock.monotonic, 0].max
        truth do |c|
          deadline = start_at + @seconds
          MAX_OPS.times do
            break if Clock.monotonic > deadline

            step(cache, c, index, rng, journal)
          rescue
            journal[:errors] += 1
          end
          # A step that began before the deadline ends within the store's timeouts.
          settle(index, deadline + 1)
          KEYS.times do |i|
            read = version(cache.read(key(i)))
            truth = c.exec_params("SELECT ver FROM #{truth_table} WHERE k = $1", [key(i)]).getvalue(0, 0).to_i
            journal[:finals] << [key(i), read, truth, (read && read < truth) ? held(cache, key(i)) : nil]
          end
        end
        File.binwrite(File.join(@dir, "journal-#{index}"), Marshal.dump(journal))
        cache.close
        true
      end

      # Host 0's second process: fetches until the run's deadline, its blocks slow.
      def start_worker(start_at)
        seed = @seed * 7 + (@workers_started = (@workers_started || 0) + 1)
        ChildProcesses.fork_child do
          cache, = journaled_store(0)
          rng = Random.new(seed)
          sleep [start_at - Clock.monotonic, 0].max
          truth do |c|
            MAX_OPS.times do
              break if Clock.monotonic > start_at + @seconds

              name = key(rng.rand(KEYS))
              cache.fetch(name, tags: tagged?(Integer(name.delete_prefix("k"))) ? "t/#{name}" : nil) do
                ver = c.exec_params("SELECT ver FROM #{truth_table} WHERE k = $1", [name]).getvalue(0, 0)
                sleep(rng.rand(WORKER_FILL_MS) / 1000.0)
                "#{name}:#{ver}"
              end
            end
          end
          cache.close
          true
        end
      end

      def step(cache, c, index, rng, journal)
        i = rng.rand(KEYS)
        name = key(i)
        if owner(i) == index && rng.rand < CHANGE_SHARE
          ver = c.exec_params("UPDATE #{truth_table} SET ver = ver + 1 WHERE k = $1 RETURNING ver", [name]).getvalue(0, 0).to_i
          if tagged?(i)
            cache.invalidate_tags("t/#{name}")
          elsif rng.rand < 0.5
            cache.write(name, "#{name}:#{ver}")
          else
            cache.delete(name)
          end
          journal[:acks] << [name, ver, Clock.monotonic]
        else
          began = Clock.monotonic
          value = if rng.rand < 0.7
            cache.fetch(name, tags: tagged?(i) ? "t/#{name}" : nil) do
              ver = c.exec_params("SELECT ver FROM #{truth_table} WHERE k = $1", [name]).getvalue(0, 0)
              sleep(rng.rand(SLOW_FILL_MS) / 1000.0)
              "#{name}:#{ver}"
            end
          else
            cache.read(name)
          end
          journal[:reads] << [name, version(value), began] if value
        end
      end

      def version(value)
        value && Integer(value.split(":").last)
      end

      # What each tier of cache holds for name, for a stale final read's message: the versions
      # its bytes name, or an error's class.
      def held(cache, name)
        key = cache.send(:normalize_key, name, cache.send(:merged_options, {}))
        cache.stack.tier_names.to_h do |tier|
          bytes = cache.stack[tier].get(key)
          [tier, bytes && bytes.b.scan(/k\d+:(\d+)/n).flatten.map(&:to_i)]
        rescue => e
          [tier, e.class.name]
        end
      end

      # The run's network and faults until the hosts' loops end: in its first half only the
      # proxies' latency changes (every 0.1-0.3 s, one proxy, 0-MAX_DELAY_MS); in the second, a
      # fault (a path cut or memcached stopped, 0.3 s) every 0.5-1 s, latency changes between.
      # [[kind, began, ended], ...] of the faults (monotonic seconds).
      def inject_faults(start_at)
        rng = Random.new(@seed)
        faults = []
        sleep [start_at - Clock.monotonic, 0].max
        deadline = start_at + @seconds
        next_fault = start_at + @seconds / 2.0
        # Bound: one change per 0.1 s at least, until the deadline.
        while Clock.monotonic < deadline - 0.5
          if Clock.monotonic >= next_fault
            faults << case rng.rand(3)
            when 0 then cut(@proxies.sample(random: rng))
            when 1 then stop
            else kill_worker(start_at)
            end
            next_fault = Clock.monotonic + 0.5 + rng.rand * 0.5
          else
            @proxies.sample(random: rng).delay = rng.rand(MAX_DELAY_MS + 1) / 1000.0
          end
          sleep 0.1 + rng.rand * 0.2
        end
        @proxies.each { |proxy| proxy.delay = 0 }
        faults
      end

      def cut(proxy)
        fault(:cut) do
          proxy.cut
          sleep 0.3
          proxy.mend
        end
      end

      def stop
        fault(:stop) do
          @memcached.pause
          sleep 0.3
          @memcached.resume
        end
      end

      def kill_worker(start_at)
        fault(:kill) do
          ChildProcesses.kill_and_reap(@worker, 5)
          @worker = start_worker(start_at)
        end
      end

      def fault(kind)
        began = Clock.monotonic
        yield
        [kind, began, Clock.monotonic]
      end

      def judge(faults, failed)
        journals = Array.new(HOSTS) do |index|
          path = File.join(@dir, "journal-#{index}")
          File.exist?(path) ? Marshal.load(File.binread(path)) : {reads: [], acks: [], finals: [], errors: 0} # rubocop:disable Security/MarshalLoad -- the run's own file
        end
        # name => [[version, acknowledged at], ...] by version: one owner per key, so in time order too
        acks = journals.flat_map { |j| j[:acks] }.group_by(&:first).transform_values { |list| list.map { |_, ver, at| [ver, at] }.sort }
        round_lists = Array.new(HOSTS) { |index| rounds(index).sort }
        announced = announces
        stale = BOUNDS.to_h { |bound| [bound, 0] }
        in_faults = out_of_order = taken_back = 0
        examples = []
        worst = worst_in_faults = 0.0
        journals.each_with_index do |journal, index|
          journal[:reads].each do |name, ver, began|
            later = acks.fetch(name, []).select { |newer, _| newer > ver }
            next if later.empty?

            newer, acked = later.find { |_, at| reached(index, name, at, round_lists[index], faults) < began }
            if newer && announced_meanwhile?(announced.fetch(name, []), acked, began, round_lists[index])
              taken_back += 1
            elsif newer
              out_of_order += 1
              examples << {host: index, key: name, read: ver, newer: newer, began_after_ack_ms: ((began - acked) * 1000).round(1)} if examples.size < 3
            end
            late = began - later.first.last
            if faults.any? { |_, from, to| began.between?(from, to + FAULT_GRACE) }
              in_faults += 1 if late > @bound
              worst_in_faults = late if late > worst_in_faults
              next
            end
            BOUNDS.each { |bound| stale[bound] += 1 if late > bound }
            worst = late if late > worst
          end
        end
        finals = journals.each_with_index.flat_map { |j, index| j[:finals].map { |final| [*final, index] } }
        Result.new(seconds: @seconds, reads: journals.sum { |j| j[:reads].size }, changes: acks.sum { |_, list| list.size },
          faults: faults.map(&:first).tally, stale: stale, worst_ms: (worst * 1000).round(1), stale_in_faults: in_faults,
          worst_in_faults_ms: (worst_in_faults * 1000).round(1), out_of_order: out_of_order, out_of_order_examples: examples,
          taken_back: taken_back, rounds: round_lists.map(&:size),
          final_reads: finals.size, final_stale: finals.count { |_, ver, truth| ver && ver < truth },
          final_stale_examples: finals.select { |_, ver, truth| ver && ver < truth }.first(3)
            .map { |name, ver, truth, tiers, index| {host: index, key: name, read: ver, truth: truth, tiers: tiers} },
          errors: failed + journals.map { |j| j[:errors] }.select(&:positive?).map { |n| "#{n} errors raised" })
      end

      # When a change acknowledged at acked reached host index: at once on its owner, unless
      # the change was made during a fault or within FAULT_GRACE after it (a delete memcached
      # missed is settled by the pollers from the log, and the owner's L1 may take the old copy
      # back from memcached until then); else at the end of the first whole round of the host's
      # poller that began after it (never, when none did).
      def reached(index, name, acked, host_rounds, faults)
        if owner(Integer(name.delete_prefix("k"))) == index && faults.none? { |_, from, to| acked.between?(from, to + FAULT_GRACE) }
          return acked
        end

        host_rounds.find { |began, _| began > acked }&.last || Float::INFINITY
      end

      # Whether a take-back announced the key (at any of times) after a change acknowledged at
      # acked and at most the bound after a read that began at began, which began before the
      # announcement reached its host (the end of the host's first whole round after it).
      def announced_meanwhile?(times, acked, began, host_rounds)
        times.any? do |at|
          at > acked && at < began + @bound && began < (host_rounds.find { |round_began, _| round_began > at }&.last || Float::INFINITY)
        end
      end

      def drop_tables
        @record_class.connection_pool.with_connection do |c|
          [@name, "#{@name}_versions", "#{@name}_log", truth_table].each { |table| c.drop_table(table, if_exists: true) }
        end
        @record_class.remove_connection
      rescue ActiveRecord::ActiveRecordError
        nil
      end
    end
  end
end
