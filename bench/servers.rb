# frozen_string_literal: true

require "etc"
require "fileutils"
require "open3"
require "socket"
require "tmpdir"

module Strata
  module Bench
    # The servers a run starts for itself, so that bin/bench on a fresh machine (where script/setup
    # installed memcached and PostgreSQL, and nothing runs) measures every store and report:
    #
    # - memcached, when STRATA_MEMCACHED is not set: one server with its default memory (64 MiB),
    #   as the README's run had;
    # - PostgreSQL (script/postgres, a cluster in a scratch directory), when STRATA_POSTGRES_URL is
    #   not set and the run includes the cross-host staleness report.
    #
    # Each listens on 127.0.0.1 on a free port; the run sees it through the variable, as it would
    # a server of the user's, and #stop stops it and removes its files. A variable that is set,
    # even empty, is the user's choice: STRATA_MEMCACHED= runs without memcached. A server whose
    # program is missing or does not start is a note on err, and the run goes on without it.
    class Servers
      # Seconds for memcached to accept connections, and to exit after SIGTERM.
      WAIT = 10
      POSTGRES_SCRIPT = File.expand_path("../script/postgres", __dir__)

      # Starts what is missing, yields, stops it.
      def self.around(postgres:, err:)
        servers = new(err)
        servers.start(postgres: postgres)
        yield
      ensure
        servers&.stop
      end

      def initialize(err)
        @err = err
        @memcached_pid = nil
        @postgres_dir = nil
        @set = []
        @owner_pid = Process.pid
      end

      def start(postgres:)
        start_memcached unless ENV.key?("STRATA_MEMCACHED")
        start_postgres if postgres && !ENV.key?("STRATA_POSTGRES_URL")
      end

      # Bounded: WAIT seconds for memcached, script/postgres' own bound for PostgreSQL. A forked
      # child that leaves through this method's caller stops nothing: the servers are the run's.
      def stop
        return unless Process.pid == @owner_pid

        stop_memcached
        stop_postgres
        @set.each { |name| ENV.delete(name) }
        @set.clear
      end

      private

      def start_memcached
        return note("memcached is not installed (script/setup installs it)") unless program?("memcached")

        port = free_port
        @memcached_pid = Process.spawn("memcached", "-l", "127.0.0.1", "-p", port.to_s, "-U", "0",
          "-u", Etc.getpwuid.name, out: File::NULL, err: File::NULL)
        deadline = now + WAIT
        until accepting?(port) # bound: WAIT seconds
          if now > deadline || Process.wait(@memcached_pid, Process::WNOHANG)
            stop_memcached
            return note("memcached on 127.0.0.1:#{port} did not start")
          end
          sleep 0.01
        end
        set("STRATA_MEMCACHED", "127.0.0.1:#{port}")
        note("started memcached on 127.0.0.1:#{port} (its default 64 MiB) for this run")
      end

      def stop_memcached
        return unless @memcached_pid

        pid = @memcached_pid
        @memcached_pid = nil
        Process.kill(:TERM, pid)
        deadline = now + WAIT
        until Process.wait(pid, Process::WNOHANG) # bound: WAIT seconds, then SIGKILL
          if now > deadline
            Process.kill(:KILL, pid)
            Process.wait(pid)
            break
          end
          sleep 0.01
        end
      rescue Errno::ESRCH, Errno::ECHILD
        nil # already reaped
      end

      def start_postgres
        return note("PostgreSQL is not installed (script/setup installs it)") if Dir["/usr/lib/postgresql/*/bin/pg_ctl"].empty?

        @postgres_dir = Dir.mktmpdir("strata-bench-postgres-")
        out, errors, status = Open3.capture3(POSTGRES_SCRIPT, "start", @postgres_dir, free_port.to_s)
        unless status.success?
          stop_postgres
          return note("PostgreSQL did not start: #{errors.lines.last&.strip}")
        end
        set("STRATA_POSTGRES_URL", out.strip)
        note("started PostgreSQL at #{out.strip} for this run")
      end

      def stop_postgres
        return unless @postgres_dir

        dir = @postgres_dir
        @postgres_dir = nil
        Open3.capture3(POSTGRES_SCRIPT, "stop", dir)
        FileUtils.rm_rf(dir)
      end

      def set(name, value)
        ENV[name] = value
        @set << name
      end

      def note(text)
        @err.puts("bin/bench: #{text}")
        nil
      end

      def program?(name)
        ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).any? { |dir| File.executable?(File.join(dir, name)) }
      end

      # A free loopback port: bind to 0, read it, close (another process could take it between).
      def free_port
        server = TCPServer.new("127.0.0.1", 0)
        server.addr[1]
      ensure
        server&.close
      end

      def accepting?(port)
        Socket.tcp("127.0.0.1", port, connect_timeout: 0.2).close
        true
      rescue SystemCallError, SocketError
        false
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end
    end
  end
end
