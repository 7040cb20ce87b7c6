# frozen_string_literal: true

require "strata/clock"
require "securerandom"

module Strata
  module Bench
    module Cluster
      # The demo app (demo/, a Rails 8.1 app) under Puma on one app host: 2 workers forked from a
      # booted app (preload_app!), bound to the host's address, with an L1 file of the host's
      # own, run on Ruby 3.3 in the Debian 13 root (script/trixie) inside the host's network
      # namespace. Puma's output goes to log; #stop stops the whole process group and removes the
      # L1 file.
      class App
        PORT = 3000
        WORKERS = 2
        THREADS = 3
        ROOT = File.expand_path("../..", __dir__)
        BOOT_TIMEOUT = 120
        STOP_TIMEOUT = 20
        DUMP_AFTER = 5
        BOOTED = /Worker \d+ \(PID: (\d+)\) booted/

        attr_reader :host, :address, :workers

        # cache: STRATA_DEMO_CACHE (strata, mem_cache_store or null_store).
        def initialize(hosts, host, cache:, database_url:, log:)
          @hosts = hosts
          @host = host
          @address = hosts.address(host)
          @cache = cache
          @database_url = database_url
          @log = log
          @workers = []
        end

        # The L1 file, in /dev/shm (Hosts::L1_DIR): the Debian 13 root shares the machine's /dev,
        # so this process reads the host's counters and its poller's holder from it too.
        def l1_path
          File.join(Hosts::L1_DIR, "#{@host}.l1")
        end

        def start
          env = {
            "BUNDLE_GEMFILE" => File.join(ROOT, "demo/Gemfile"), "BUNDLE_PATH" => File.join(ROOT, "vendor/bundle"),
            "BUNDLE_VERSION" => "system", "DATABASE_URL" => @database_url, "STRATA_DEMO_L1" => l1_path,
            "STRATA_MEMCACHED" => @hosts.memcached_servers.join(","), "STRATA_DEMO_CACHE" => @cache,
            "STRATA_DEMO_BIND" => @address, "PORT" => PORT.to_s, "WEB_CONCURRENCY" => WORKERS.to_s,
            "RAILS_MAX_THREADS" => THREADS.to_s, "STRATA_DEMO_LOG_LEVEL" => "warn", "STRATA_DEMO_THREAD_DUMPS" => "1",
            "SECRET_KEY_BASE" => SecureRandom.hex(64)
          }
          command = @hosts.network.command(@host, File.join(ROOT, "script/trixie"), "run", "env",
            *env.keys.map { |name| "#{name}=#{env[name]}" }, "sh", "-c", "cd demo && exec bundle exec puma -C config/puma.rb")
          # Without this process's Bundler (RUBYOPT, BUNDLE_*): the root's Ruby has its own.
          @pid = Bundler.with_unbundled_env { Process.spawn(*command, out: @log, err: @log, pgroup: true) }
          self
        end

        # Waits until Puma listens and both workers booted (its log says so); raises with the log
        # when it does not within BOOT_TIMEOUT s.
        def wait_booted
          deadline = Clock.monotonic + BOOT_TIMEOUT
          loop do
            text = log
            @workers = text.scan(BOOTED).flatten.map(&:to_i).uniq
            return self if @workers.size >= WORKERS && text.include?("Listening on")
            raise "Puma on #{@host} exited while booting:\n#{text}" if Process.wait(@pid, Process::WNOHANG)
            raise "Puma on #{@host} did not boot within #{BOOT_TIMEOUT} s:\n#{text}" if Clock.monotonic > deadline

            sleep 0.2
          end
        end

        # The workers alive now (Puma starts another for one that died).
        def live_workers
          log.scan(BOOTED).flatten.map(&:to_i).uniq.select { |pid| alive?(pid) }
        end

        def log
          File.exist?(@log) ? File.read(@log) : ""
        end

        # TERM to the process group (Puma stops its workers), KILL to what is left of it after
        # STOP_TIMEOUT s. Workers still alive after DUMP_AFTER s print their threads' backtraces
        # to the log (SIGPWR, config/puma.rb).
        def stop
          return unless @pid

          signal(:CONT, -@pid)
          workers = live_workers
          signal(:TERM, -@pid)
          dump_at = Clock.monotonic + DUMP_AFTER
          deadline = Clock.monotonic + STOP_TIMEOUT
          reaped = false
          # The group outlives @pid (script/trixie's shell): Puma is its grandchild.
          until ((reaped ||= reap(Process::WNOHANG)) && !alive?(-@pid)) || Clock.monotonic > deadline
            if dump_at && Clock.monotonic > dump_at
              workers.each { |pid| signal(:PWR, pid) }
              dump_at = nil
            end
            sleep 0.1
          end
          signal(:KILL, -@pid)
          reap(0) unless reaped
          sleep 0.05 while alive?(-@pid) && Clock.monotonic < deadline + STOP_TIMEOUT
          @pid = nil
          File.delete(l1_path) if File.exist?(l1_path)
        end

        private

        def reap(flags)
          Process.wait(@pid, flags)
        rescue Errno::ECHILD
          true
        end

        def alive?(pid)
          Process.kill(0, pid)
          true
        rescue Errno::ESRCH
          false
        end

        def signal(name, pid)
          Process.kill(name, pid)
        rescue Errno::ESRCH
          nil
        end
      end
    end
  end
end
