# frozen_string_literal: true

require "fileutils"
require "securerandom"
require "socket"
require "tmpdir"

module Strata
  module Bench
    # What one bench run owns: two private scratch directories (mode 0700, removed with everything
    # in them by #close), one on tmpfs for L1 tables as production keeps them, one on disk for
    # SQLite databases and FileStore as apps keep them (where fsync costs what it costs users);
    # the memcached servers to talk to; and a nonce that keeps this run's keys apart from earlier
    # runs against the same servers.
    class Environment
      DEFAULTS = {
        # One server by default: the bench compares client cost, not distribution.
        memcached: "127.0.0.1:21211",
        # Loopback answers in microseconds; a missing server should cost the run nothing noticeable.
        connect_timeout: 0.25
      }.freeze

      attr_reader :dir, :disk_dir, :memcached_servers, :nonce

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
        @disk_dir = Dir.mktmpdir("strata-bench-", disk_base)
        File.chmod(0o700, @disk_dir)
      end

      # A fresh path for an L1 table file in the tmpfs directory; nothing exists there yet.
      def table_path(name, ext: "table")
        @tables += 1
        File.join(@dir, "#{name}-#{@tables}.#{ext}")
      end

      # A fresh path for a database file or a store's directory in the disk directory.
      def disk_path(name, ext:)
        @tables += 1
        File.join(@disk_dir, "#{name}-#{@tables}.#{ext}")
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

      # A short description of where files live, for the report header.
      def scratch_description
        "L1 tables in #{@dir} (#{filesystem(@dir)}); SQLite and FileStore in #{@disk_dir} (#{filesystem(@disk_dir)})"
      end

      def close
        # A forked child inherits this object; only the process that made the directory removes it.
        return unless Process.pid == @owner_pid

        [@dir, @disk_dir].each { |dir| FileUtils.remove_entry(dir) if dir && File.exist?(dir) }
      end

      private

      def unreachable(server)
        host, port = server.split(":", 2)
        Socket.tcp(host, Integer(port || 11_211), connect_timeout: @connect_timeout).close
        nil
      rescue SystemCallError, SocketError, IOError, ArgumentError => e
        "memcached #{server} unreachable (#{e.class}: #{e.message})"
      end

      # A real L1 table lives on tmpfs ($XDG_RUNTIME_DIR or /dev/shm by default); a disk-backed /tmp
      # would add writeback cost that production does not pay. STRATA_BENCH_DIR overrides.
      def scratch_base
        return ENV["STRATA_BENCH_DIR"] if ENV["STRATA_BENCH_DIR"]

        shm = "/dev/shm"
        (File.directory?(shm) && File.writable?(shm)) ? shm : Dir.tmpdir
      end

      # Dir.tmpdir unless it is tmpfs, else the working directory's tmp/; STRATA_BENCH_DISK_DIR
      # overrides.
      def disk_base
        return ENV["STRATA_BENCH_DISK_DIR"] if ENV["STRATA_BENCH_DISK_DIR"]
        return Dir.tmpdir unless filesystem(Dir.tmpdir) == "tmpfs"

        FileUtils.mkdir_p(File.join(Dir.pwd, "tmp")).first
      end

      # The filesystem type of the mount holding path, from /proc/self/mounts (the longest mount
      # point that prefixes it), or "unknown".
      def filesystem(path)
        real = File.realpath(path)
        mounts = File.readlines("/proc/self/mounts").map(&:split)
        best = mounts.select { |m| real == m[1] || real.start_with?(m[1].end_with?("/") ? m[1] : "#{m[1]}/") }
          .max_by { |m| m[1].size }
        best ? best[2] : "unknown"
      rescue SystemCallError
        "unknown"
      end
    end
  end
end
