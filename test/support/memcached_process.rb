# frozen_string_literal: true

require "socket"
require "etc"
require "support/child_processes"

module Strata
  module TestSupport
    # A private memcached that a test starts, kills and restarts itself. Every wait is bounded.
    class MemcachedProcess
      # Seconds to wait for the server to accept connections, or to be reaped after SIGKILL.
      WAIT = 5

      attr_reader :port

      # A free loopback port: bind to 0, read the port, close. Another process could take it in
      # between; the tests accept that small race.
      def self.free_port
        server = TCPServer.new("127.0.0.1", 0)
        server.addr[1]
      ensure
        server&.close
      end

      # options: more memcached command-line arguments, e.g. ["-m", "2", "-M"].
      def initialize(port = self.class.free_port, options: [])
        @port = port
        @options = options
        @pid = nil
      end

      def server
        "127.0.0.1:#{@port}"
      end

      # Spawns memcached and waits (at most WAIT seconds) until it accepts a connection.
      def start
        @pid = Process.spawn("memcached", "-l", "127.0.0.1", "-p", @port.to_s, "-U", "0", "-u", Etc.getlogin || Etc.getpwuid.name,
          *@options, out: File::NULL, err: File::NULL)
        deadline = now + WAIT
        loop do # bound: WAIT seconds
          return self if accepting?
          raise "memcached on #{@port} did not start within #{WAIT}s" if now > deadline

          sleep 0.01
        end
      end

      # SIGKILL and reap (bounded). Safe to call when not running.
      def kill
        return unless @pid

        ChildProcesses.kill_and_reap(@pid, WAIT)
        @pid = nil
      end

      private

      def accepting?
        Socket.tcp("127.0.0.1", @port, connect_timeout: 0.2).close
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
