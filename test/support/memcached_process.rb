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

      # SIGSTOP, and waits (at most WAIT seconds) until every thread has stopped: the server
      # stalls. The kernel still completes handshakes and buffers requests; nothing is answered
      # until #resume.
      def pause
        Process.kill(:STOP, @pid)
        wait_for_state("stopped") { |states| states.all?("T") }
      end

      # SIGCONT, and waits until no thread is stopped: the server runs again and works through
      # what it buffered.
      def resume
        Process.kill(:CONT, @pid)
        wait_for_state("running") { |states| states.none?("T") }
      end

      private

      # Waits until the block is true of the states of the server's threads (one letter each,
      # from /proc: "T" stopped); a signal reaches a process's threads one by one.
      def wait_for_state(name)
        deadline = now + WAIT
        loop do # bound: WAIT seconds
          states = Dir.glob("/proc/#{@pid}/task/*/stat").filter_map do |path|
            File.read(path)[/\) (\S)/, 1]
          rescue Errno::ENOENT
            nil # the thread ended
          end
          return nil if yield(states)
          raise "memcached on #{@port} was not #{name} within #{WAIT}s" if now > deadline

          sleep 0.001
        end
      end

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
