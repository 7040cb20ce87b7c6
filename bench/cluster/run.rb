# frozen_string_literal: true

require "strata/clock"
require "fileutils"
require "json"
require "net/http"
require "open3"
require "pg"
require "strata/cli/l1_table"
require "strata/poller"
require_relative "../children"
require_relative "app"
require_relative "hosts"
require_relative "load"
require_relative "report"

module Strata
  module Bench
    module Cluster
      # One run of the cluster (bin/cluster run; docs/scale.md): on hosts (Hosts, up), for each
      # mode in turn, the demo app under Puma on every app host, a load per app host (Load, a
      # process each), a writer changing bugs at a fixed rate, through the apps and through raw
      # SQL, probers that measure how long each change takes to reach every host, a sampler of
      # the tiers' counters and the database's transactions, and the faults of phases, each
      # applied at its phase's start and mended at its end. Then Report tells what happened, per
      # phase. Every loop is bounded in time and count; #run stops what it started, also when it
      # fails.
      class Run
        # A phase of the load, in seconds from its start; fault (one #apply knows, or nil) is
        # applied at start and mended at finish.
        Phase = Struct.new(:name, :start, :finish, :fault)
        FULL = [
          Phase.new("steady", 0, 10, nil),
          Phase.new("mc2 killed", 10, 15, :memcached),
          Phase.new("after mc2", 15, 25, nil),
          Phase.new("app1 poller stopped", 25, 30, :poller),
          Phase.new("after poller", 30, 35, nil),
          Phase.new("app3 cut off", 35, 40, :cut),
          Phase.new("after cut", 40, 45, nil),
          Phase.new("app3 cut from pg", 45, 50, :database),
          Phase.new("after pg cut", 50, 55, nil),
          Phase.new("app2 worker killed", 55, 60, :worker),
          Phase.new("after worker", 60, 70, nil)
        ].freeze
        # bin/test's: one fault, a minute with the boot.
        SHORT = [
          Phase.new("steady", 0, 15, nil),
          Phase.new("mc2 killed", 15, 20, :memcached),
          Phase.new("after mc2", 20, 35, nil)
        ].freeze
        # A mode: the app's Rails.cache (STRATA_DEMO_CACHE), the entry's representation cache
        # (X-Representation-Cache; none where the store keeps no tags, which would leave entries
        # stale for good) and the page the load asks for (Load::PAGES): on Strata, its tagged
        # fragments, and Rails' stock ones too, which every store serves alike.
        Mode = Struct.new(:name, :cache, :representation, :page)
        MODES = {
          "strata" => Mode.new("Strata", "strata", "strata", :tagged),
          "strata_stock" => Mode.new("Strata, stock page", "strata", "strata", :stock),
          "mem_cache_store" => Mode.new("MemCacheStore", "mem_cache_store", "none", :stock),
          "null_store" => Mode.new("no cache", "null_store", "none", :stock)
        }.freeze
        BUGS = 300
        SKEW = 0.9
        CONNECTIONS = 3 # per app host
        WRITES_PER_SECOND = 3
        RAW_SQL_EVERY = 4 # one write in 4 is raw SQL, on the database host
        # Seconds of load before the phases, after the warm-up pass (Run#warm_up), not counted:
        # the hit ratio falls from the pass's for about this long, as writes invalidate.
        WARMUP = 15
        # A change's answers are looked for this long on every host by the probers.
        PROBE_LIMIT = 5.0
        PROBE_PAUSE = 0.005
        SAMPLE_EVERY = 1.0
        MAX_REQUESTS = 1_000_000 # per connection and mode: a bound, far past any run's
        TOP_STATEMENTS = 8

        attr_reader :reports

        # modes: MODES keys. dir: where logs and results go (removed unless keep).
        def initialize(hosts, modes:, phases:, dir:, out: $stdout)
          @hosts = hosts
          @modes = modes.map { |name| MODES.fetch(name) { raise ArgumentError, "unknown mode #{name}: #{MODES.keys.join(", ")}" } }
          @phases = phases
          @dir = dir
          @out = out
          @change = 0 # the writer's titles go up across modes: an old answer never reads as new
          @reports = []
        end

        def run
          FileUtils.mkdir_p(@dir)
          prepare_database
          @modes.each { |mode| @reports << run_mode(mode) }
          @reports
        end

        def database_url
          uri = URI(@hosts.postgres_url)
          uri.path = "/strata_demo"
          uri.to_s
        end

        private

        def say(line)
          @out.puts("[cluster #{Time.now.strftime("%H:%M:%S")}] #{line}")
          @out.flush
        end

        # Creates, migrates and seeds the demo's database on the database host (from this
        # machine's side of the bridge).
        def prepare_database
          say "preparing the demo's database (#{BUGS} bugs) on pg"
          out, status = Bundler.with_unbundled_env do
            Open3.capture2e(File.join(App::ROOT, "script/trixie"), "run", "env",
              "BUNDLE_GEMFILE=#{App::ROOT}/demo/Gemfile", "BUNDLE_PATH=#{App::ROOT}/vendor/bundle", "BUNDLE_VERSION=system",
              "DATABASE_URL=#{database_url}", "STRATA_DEMO_BUGS=#{BUGS}", "STRATA_DEMO_LOG_LEVEL=warn",
              "sh", "-c", "cd demo && bundle check >/dev/null 2>&1 || bundle install --quiet; bin/rails db:prepare")
          end
          raise "db:prepare failed:\n#{out}" unless status.success?

          with_database { |sql| sql.exec("CREATE EXTENSION IF NOT EXISTS pg_stat_statements") }
        end

        def with_database
          sql = PG.connect(database_url)
          yield sql
        ensure
          sql&.close
        end

        # The statements the database ran most since the mode started: [[calls, query], ...].
        def top_statements
          with_database do |sql|
            sql.exec("SELECT calls, regexp_replace(query, '\\s+', ' ', 'g') AS query FROM pg_stat_statements s " \
              "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = 'strata_demo' ORDER BY calls DESC LIMIT #{TOP_STATEMENTS}")
              .map { |row| [row["calls"].to_i, row["query"][0, 160]] }
          end
        end

        def run_mode(mode)
          reset_caches
          apps = Hosts::APPS.map { |host| App.new(@hosts, host, cache: mode.cache, database_url: database_url, log: File.join(@dir, "#{mode.cache}-#{host}.log")) }
          say "#{mode.name}: starting the app on #{apps.map(&:host).join(", ")}"
          apps.each(&:start)
          apps.each(&:wait_booted)
          measure(mode, apps)
        ensure
          stop(apps) if apps
        end

        # Stops the apps at once; says which took longer than App::DUMP_AFTER s, with its log
        # since Puma began to stop (its workers' threads among it).
        def stop(apps)
          stopping = apps.map do |app|
            Thread.new do
              began = Clock.monotonic
              app.stop
              [app, Clock.monotonic - began]
            end
          end
          stopping.map(&:value).each do |app, seconds|
            next if seconds <= App::DUMP_AFTER

            shutdown = app.log.lines.drop_while { |line| !line.include?("puma shutdown") }
            say "#{app.host}: Puma took #{seconds.round} s to stop; its log since:\n#{shutdown.first(200).join}"
          end
        end

        # Empties memcached and zeroes its counters and the database's statement counts; every
        # mode starts cold.
        def reset_caches
          Hosts::MEMCACHED.each do |host|
            @hosts.memcached(host, "flush_all")
            @hosts.memcached(host, "stats reset")
          end
          with_database { |sql| sql.exec("SELECT pg_stat_statements_reset()") }
          Dir.glob(File.join(Hosts::L1_DIR, "*")).each { |file| File.delete(file) }
        end

        def measure(mode, apps)
          headers = {"X-Representation-Cache" => mode.representation}
          warm_up(mode, apps, headers)
          start = Clock.monotonic + WARMUP
          stop = start + @phases.last.finish
          clients = apps.each_with_index.map { |app, index| client(app, index, headers, mode.page, stop) }
          writes = Queue.new
          probes = apps.map { Queue.new } # one per prober: each looks for every change
          faults = []
          samples = []
          sleep_until(start)
          say "#{mode.name}: load running; phases: #{@phases.map { |phase| "#{phase.name} #{phase.start}-#{phase.finish} s" }.join(", ")}"
          threads = [Thread.new { write(apps, headers, start, stop, writes, probes) },
            Thread.new { sample(mode, apps, stop, samples) }]
          probers = apps.zip(probes).map { |app, queue| Thread.new { probe(app, headers, queue, stop) } }
          # Their failures surface through join and value; after Ctrl-C, they are not reported.
          (threads + probers).each { |thread| thread.report_on_exception = false }
          @phases.each { |phase| run_phase(mode, phase, apps, start, faults) }
          threads.each(&:join)
          probes.each { |queue| queue << :done }
          probed = probers.flat_map(&:value)
          written = Array.new(writes.size) { writes.pop }
          records = clients.to_h { |app, reader, pid| [app.host, collect(reader, pid, stop)] }
          Report.new(mode: mode.name, phases: @phases, start: start, records: records, writes: written,
            probes: probed, samples: samples, faults: faults, bound: Report::BOUND, statements: top_statements)
        ensure
          clients&.each do |_, reader, pid|
            reader.close unless reader.closed?
            Children.reap(pid, Clock.monotonic) # killed unless it has exited
          end
        end

        # Asks for every bug's entry and page once, each from one app host (the i-th asks for the
        # bugs whose id % hosts is i), CONNECTIONS requests at a time per host, so that each
        # mode's phases start with the caches it has filled: one render per bug and kind; the
        # other hosts copy it from the shared tiers when the load first asks them. Nothing on no
        # cache, which keeps nothing.
        def warm_up(mode, apps, headers)
          return if mode.cache == "null_store"

          say "warming up: every bug's entry and page, once, from one app host each"
          apps.each_with_index.flat_map do |app, host|
            ids = (1..BUGS).select { |id| id % apps.size == host }
            Array.new(CONNECTIONS) do |slice|
              Thread.new do
                Net::HTTP.start(app.address, App::PORT, open_timeout: 2, read_timeout: 30) do |http|
                  ids.each_slice(CONNECTIONS).filter_map { |group| group[slice] }.each do |id|
                    [Load::ENTRY, Load::PAGE].each { |kind| http.request(Net::HTTP::Get.new(Load.path(kind, id, mode.page), headers)) }
                  end
                end
              end
            end
          end.each(&:join)
        end

        # Forks the load of app, which writes its records (Marshal) to the pipe it is given.
        def client(app, index, headers, page, stop)
          reader, writer = IO.pipe
          pid = fork do
            Signal.trap("INT", "IGNORE") # Ctrl-C is this process's to handle: it kills the child
            reader.close
            load = Load.new(address: app.address, port: App::PORT, bugs: BUGS, skew: SKEW, seed: 1_000 * (index + 1),
              connections: CONNECTIONS, headers: headers, page: page, stop: stop, max_requests: MAX_REQUESTS)
            writer.write(Marshal.dump(load.run))
            writer.close
            exit!(0)
          end
          writer.close
          [app, reader, pid]
        end

        def collect(reader, pid, stop)
          data = Thread.new { reader.read }
          raise "a load client did not finish" unless data.join(stop - Clock.monotonic + Load::READ_TIMEOUT + 30)

          Process.wait(pid)
          Marshal.load(data.value) # rubocop:disable Security/MarshalLoad -- our own child's records
        end

        def run_phase(mode, phase, apps, start, faults)
          sleep_until(start + phase.start)
          fault = apply(phase.fault, mode, apps) if phase.fault
          faults << fault.merge(phase: phase.name, at: Clock.monotonic) if fault
          say "#{mode.name}: #{phase.name}#{" (#{fault[:detail]})" if fault}"
          sleep_until(start + phase.finish)
        ensure
          mend(fault) if fault
        end

        # Applies fault; a Hash that #mend takes (with :detail for the log and the report).
        def apply(fault, mode, apps)
          case fault
          when :memcached
            @hosts.kill_memcached("mc2")
            {fault: fault, detail: "kill -9 of mc2's memcached"}
          when :poller
            pid = holder(apps.first) if mode.cache == "strata"
            return {fault: fault, detail: "no poller: the store is #{mode.name}"} unless pid

            Process.kill(:STOP, pid)
            {fault: fault, pid: pid, detail: "SIGSTOP of pid #{pid}, app1's poller holder"}
          when :cut
            @hosts.network.cut("app3")
            {fault: fault, detail: "app3's veth down"}
          when :database
            @hosts.network.isolate("pg", "app3")
            {fault: fault, detail: "a blackhole route on pg for app3: pg drops what it sends app3, whose clients and memcached still reach it"}
          when :worker
            pid = apps[1].live_workers.first
            Process.kill(:KILL, pid)
            {fault: fault, pid: pid, host: apps[1].host, detail: "kill -9 of app2's worker #{pid}"}
          end
        end

        def mend(fault)
          case fault[:fault]
          when :memcached then @hosts.start_memcached("mc2")
          when :poller then Process.kill(:CONT, fault[:pid]) if fault[:pid]
          when :cut then @hosts.network.cut("app3", false)
          when :database then @hosts.network.isolate("pg", "app3", false)
          end
        rescue Errno::ESRCH
          nil
        end

        # The pid of the process that polls for app's host (its L1's election).
        def holder(app)
          CLI::L1Table.new(app.l1_path).open { |table, _| Poller.holder_pid(table) }
        end

        # The writer: WRITES_PER_SECOND changes of Zipf-distributed bugs, through the apps in turn
        # and one in RAW_SQL_EVERY through raw SQL. Each goes to writes as [change, id, when it was
        # acknowledged (nil: it failed), the app host or "sql", when it was sent]; each
        # acknowledged one to every prober too.
        def write(apps, headers, start, stop, writes, probes)
          zipf = Zipf.new(n: BUGS, skew: SKEW, seed: 7)
          sql = PG.connect(database_url)
          n = 0
          while (at = start + n.fdiv(WRITES_PER_SECOND)) < stop
            sleep_until(at)
            n += 1
            change = (@change += 1)
            id = zipf.sample + 1
            title = format(Load::TITLE, change)
            via = (n % RAW_SQL_EVERY).zero? ? "sql" : apps[n % apps.size].host
            ok = if via == "sql"
              sql.exec_params("UPDATE bugs SET title = $1, updated_at = clock_timestamp() WHERE id = $2", [title, id]).cmd_tuples == 1
            else
              patch(apps.find { |app| app.host == via }, id, title, headers)
            end
            acked = Clock.monotonic
            writes << [change, id, ok ? acked : nil, via, at]
            probes.each { |queue| queue << [change, id, acked] } if ok
          end
        ensure
          sql&.close
        end

        def patch(app, id, title, headers)
          request = Net::HTTP::Patch.new("/bugs/#{id}", headers.merge("Content-Type" => "application/json"))
          request.body = JSON.generate(bug: {title: title})
          Net::HTTP.start(app.address, App::PORT, open_timeout: 2, read_timeout: 10) { |http| http.request(request) }.code == "200"
        rescue IOError, SystemCallError, Timeout::Error
          false
        end

        # One prober per app host: for each change, reads the bug's entry from the host until it
        # shows the change or PROBE_LIMIT s pass; [change, host, seconds from the acknowledgement to
        # the start of the request that showed it (its answer was made after) or nil, whether the host
        # answered at all] (a host cut off, or a backlog of changes older than PROBE_LIMIT, leaves
        # changes it never answered for).
        def probe(app, headers, probes, stop)
          results = []
          http = nil
          while (event = probes.pop) != :done
            change, id, acked = event
            seen = nil
            answered = false
            deadline = [acked, stop].min + PROBE_LIMIT
            while Clock.monotonic < deadline
              begin
                http ||= Net::HTTP.start(app.address, App::PORT, open_timeout: 1, read_timeout: 2)
                asked = Clock.monotonic
                shown = Load.change_of(http.request(Net::HTTP::Get.new("/bugs/#{id}", headers)).body)
                answered = true
                break seen = [asked - acked, 0].max if shown >= change
              rescue IOError, SystemCallError, Timeout::Error
                http = nil
              end
              sleep PROBE_PAUSE
            end
            results << [change, app.host, seen, answered]
          end
          results
        ensure
          http&.finish if http&.started?
        end

        # Every SAMPLE_EVERY s until stop: each app host's counters (Strata: its L1 file), each
        # memcached node's, and the database's transactions and statements (the sampler's own two
        # included).
        def sample(mode, apps, stop, samples)
          sql = PG.connect(database_url)
          while Clock.monotonic < stop + SAMPLE_EVERY
            sample = {at: Clock.monotonic, memcached: {}, l1: {}}
            Hosts::MEMCACHED.each do |host|
              stats = @hosts.memcached_stats(host)
              sample[:memcached][host] = stats&.slice("get_hits", "get_misses", "uptime")
            end
            apps.each { |app| sample[:l1][app.host] = tiers(app) } if mode.cache == "strata"
            sample[:transactions] = sql.exec("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'strata_demo'").getvalue(0, 0).to_i
            sample[:queries] = sql.exec("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid " \
              "WHERE d.datname = 'strata_demo'").getvalue(0, 0).to_i
            samples << sample
            sleep SAMPLE_EVERY
          end
        ensure
          sql&.close
        end

        # The tiers' counters of app's host, from its L1 file; nil when it can't be read.
        def tiers(app)
          CLI::L1Table.new(app.l1_path).open { |table, _| table.counters[:tiers] }
        rescue CLI::L1Table::Refused, Strata::Error, SystemCallError
          nil
        end

        def sleep_until(at)
          left = at - Clock.monotonic
          sleep left if left.positive?
        end
      end
    end
  end
end
