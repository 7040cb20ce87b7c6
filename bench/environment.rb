# frozen_string_literal: true

require "fileutils"
require "securerandom"
require "socket"
require "tmpdir"

module Strata
  module Bench
    # What one bench run owns: a private scratch directory for table and SQLite files (mode 0700,
    # removed with everything in it by #close), the memcached servers to talk to, and a nonce that
    # keeps this run's keys apart from earlier runs against the same servers.
    class Environment
      DEFAULTS = {
        # One server by default: the bench compares client cost, not distribution.
        memcached: "127.0.0.1:21211",
        # Loopback answers in microseconds; a missing server should cost the run nothing noticeable.
        connect_timeout: 0.25
      }.freeze

      attr_reader :dir, :memcached_servers, :nonce

      def self.open(**options)
        env = new(**options)
        yield env
      ensure
        env&.close
      end

      def initialize(memcached: ENV.fetch("STRATA_MEMCACHED", DEFAULTS[:memcached]),
        connect_timeout: DEFAULTS[:connect_timeout])
        @memcached_servers = memcached.split(",").map(&:strip).reject(&:empty?).freeze
        @connect_timeout = connect_timeout
        @nonce = SecureRandom.hex(4)
        @owner_pid = Process.pid
        @tables = 0
        @dir = Dir.mktmpdir("strata-bench-", scratch_base)
        File.chmod(0o700, @dir)
      end

      # A fresh path for a table or database file inside the private directory; nothing exists
      # there yet.
      def table_path(name, ext: "table")
        @tables += 1
        File.join(@dir, "#{name}-#{@tables}.#{ext}")
      end

      # Removes a table file and anything the table keeps beside it (path plus a suffix).
      def remove_table(path)
        Dir.glob("#{path}*").each { |file| FileUtils.rm_f(file) }
      end

      # nil when every configured memcached accepts a TCP connection, else a one-line reason.
      def memcached_unreachable_reason
        return @memcached_reason if defined?(@memcached_reason)

        @memcached_reason =
          if @memcached_servers.empty?
            "STRATA_MEMCACHED names no server"
          else
            @memcached_servers.filter_map { |server| unreachable(server) }.first
          end
      end

      # A short description of where table files live, for the report header.
      def scratch_description
        fs = (@dir.start_with?("/dev/shm") ? "tmpfs" : "disk-backed tmpdir")
        "#{@dir} (#{fs})"
      end

      def close
        # A forked child inherits this object; only the process that made the directory removes it.
        return unless Process.pid == @owner_pid

        FileUtils.remove_entry(@dir) if File.exist?(@dir)
      end

      private

      def unreachable(server)
        host, port = server.split(":", 2)
        Socket.tcp(host, Integer(port || 11_211), connect_timeout: @connect_timeout).close
        nil
      rescue SystemCallError, SocketError, IOError, ArgumentError => e
        "memcached #{server} unreachable (#{e.class}: #{e.message})"
      end

      # A real L1 table lives on tmpfs (DESIGN section 5); a disk-backed /tmp would add writeback
      # cost that production does not pay. STRATA_BENCH_DIR overrides.
      def scratch_base
        return ENV["STRATA_BENCH_DIR"] if ENV["STRATA_BENCH_DIR"]

        shm = "/dev/shm"
        (File.directory?(shm) && File.writable?(shm)) ? shm : Dir.tmpdir
      end
    end
  end
end
