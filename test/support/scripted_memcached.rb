# frozen_string_literal: true

require "socket"

module Strata
  module TestSupport
    # A loopback server that speaks just enough of memcached 1.6.18 for Meta::Client to take it for
    # one: it answers the client's feature probe as 1.6.18 does, and every other request line with
    # what the test's block returns. That lets a test send replies no real server sends on demand:
    # a value without its opaque, an opaque out of range, SERVER_ERROR to any command.
    #
    #   server = ScriptedMemcached.new { |line, data| "SERVER_ERROR out of memory\r\n" if line.start_with?("ms") }
    #   server.start
    #   client = Strata::Meta::Client.new(servers: [server.server])
    #
    # The block gets each request line without its "\r\n" and, for ms, the data block; it returns
    # the bytes to send back, :close to close the connection, :hold to answer nothing until
    # #release (which says what then happens), or nil for the default: MN to mn, nothing to a
    # quiet command, EN to mg, HD to anything else. The lines
    # received, the probe's left out, are kept in #commands, and #connections counts the
    # connections accepted, so a test can see whether the client reconnected.
    #
    # Each connection is served by a thread of its own; #stop closes everything and ends them.
    class ScriptedMemcached
      # Seconds a thread of this server waits at most, for a line or a #release.
      WAIT = 5
      PROBE_REPLIES = {
        "version" => "VERSION 1.6.18\r\n",
        "stats settings" => "STAT item_size_max 1048576\r\nEND\r\n"
      }.freeze

      attr_reader :connections

      def initialize(&script)
        @script = script || ->(_line, _data) {}
        @listener = nil
        @acceptor = nil
        @threads = []
        @sockets = []
        @commands = []
        @connections = 0
        @lock = Mutex.new
        @released = ConditionVariable.new
        @release_count = 0
        @after_release = nil
      end

      def start
        @listener = TCPServer.new("127.0.0.1", 0)
        @acceptor = Thread.new { accept_loop }
        self
      end

      def server
        "127.0.0.1:#{@listener.addr[1]}"
      end

      # Request lines received so far, but for the feature probes'.
      def commands
        @lock.synchronize { @commands.dup }
      end

      # Lets every reply held by :hold so far go on: then is what each does, :close or nil (the
      # default reply).
      def release(then_reply = nil)
        @lock.synchronize do
          @release_count += 1
          @after_release = then_reply
          @released.broadcast
        end
      end

      # Closes the listener and every connection, lets held replies go and ends every thread
      # (each join bounded by WAIT).
      def stop
        @listener&.close
        @acceptor&.join(WAIT) || @acceptor&.kill
        release(:close)
        threads = @lock.synchronize do
          @sockets.each { |socket| socket.close unless socket.closed? }
          @threads.dup
        end
        threads.each { |thread| thread.join(WAIT) || thread.kill }
        nil
      end

      private

      def accept_loop
        loop do # bound: ends when #stop closes the listener
          socket = @listener.accept
          @lock.synchronize do
            @connections += 1
            @sockets << socket
            @threads << Thread.new(socket) { |s| serve(s) }
          end
        end
      rescue IOError, SystemCallError
        nil # stopped
      end

      def serve(socket)
        previous = nil
        while (line = read_line(socket)) # bound: ends at EOF or #stop
          probe = probe_line?(line, previous)
          previous = line
          @lock.synchronize { @commands << line } unless probe
          data = read_data(socket, line)
          reply = probe ? probe_reply(line) : @script.call(line, data)
          reply = hold if reply == :hold
          break if reply == :close

          socket.write(reply || default_reply(line))
        end
      rescue IOError, SystemCallError
        nil
      ensure
        socket.close unless socket.closed?
      end

      # Waits (at most WAIT seconds) for the next #release; what it said to do then.
      def hold
        @lock.synchronize do
          seen = @release_count
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + WAIT
          while @release_count == seen # bound: WAIT seconds
            left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
            return nil if left <= 0

            @released.wait(@lock, left)
          end
          @after_release
        end
      end

      def read_line(socket)
        line = socket.gets("\r\n")
        line&.chomp("\r\n")
      end

      # The data block of an ms ("ms <key> <length> ..."), without its "\r\n".
      def read_data(socket, line)
        return nil unless line.start_with?("ms ")

        length = Integer(line.split(" ")[2])
        data = socket.read(length + 2)
        data&.byteslice(0, length)
      end

      # The probe's lines: version, then mn, commands on its probe key, stats settings.
      def probe_line?(line, previous)
        PROBE_REPLIES.key?(line) || line.include?("strata:probe:") || (line == "mn" && previous == "version")
      end

      # As 1.6.18 answers the probe: leases and stale (mg N answers W), no E flag.
      def probe_reply(line)
        return PROBE_REPLIES.fetch(line) if PROBE_REPLIES.key?(line)
        return "MN\r\n" if line == "mn"
        return "HD c1 W\r\n" if line.start_with?("mg") && line.include?(" N1")
        return "CLIENT_ERROR bad command line format\r\n" if line.include?(" E1")

        "HD\r\n"
      end

      # A quiet command (q) answers nothing: its EN or HD is what q hides.
      def default_reply(line)
        return "MN\r\n" if line == "mn"
        return "" if line.end_with?(" q")

        line.start_with?("mg") ? "EN\r\n" : "HD\r\n"
      end
    end
  end
end
