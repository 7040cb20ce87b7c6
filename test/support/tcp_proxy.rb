# frozen_string_literal: true

require "socket"

module Strata
  module TestSupport
    # A TCP proxy on 127.0.0.1 for fault tests, run by the test process in threads of its own:
    # every connection made to #address is forwarded to the target, and the test decides, step
    # by step, what happens to the bytes clients send:
    #
    # - #hold keeps them (read, not forwarded) until #release, which sends them on in order: a
    #   path as slow as the test needs, the request neither lost nor failed;
    # - #delay= adds that many seconds before each chunk goes on (a longer round trip);
    # - #cut closes every connection and refuses new ones until #mend (a path cut).
    #
    # Only what the test connects to it is forwarded, only to the target it was given. #close
    # stops every thread and closes every socket.
    class TcpProxy
      CHUNK = 64 * 1024

      def initialize(target_host, target_port)
        @target = [target_host, target_port]
        @server = TCPServer.new("127.0.0.1", 0)
        @lock = Mutex.new
        @changed = ConditionVariable.new
        @held = false
        @cut = false
        @delay = 0
        @sockets = []
        @threads = []
        @closed = false
        @acceptor = Thread.new { accept_loop }
        @acceptor.report_on_exception = false
      end

      # "127.0.0.1:port", for a memcached servers: list.
      def address
        "127.0.0.1:#{@server.addr[1]}"
      end

      def hold
        @lock.synchronize { @held = true }
      end

      def release
        @lock.synchronize do
          @held = false
          @changed.broadcast
        end
      end

      def delay=(seconds)
        @lock.synchronize { @delay = seconds }
      end

      # Closes every connection; new ones are closed as they come until #mend.
      def cut
        sockets = @lock.synchronize do
          @cut = true
          @changed.broadcast
          @sockets.dup
        end
        sockets.each { |socket| close_socket(socket) }
      end

      def mend
        @lock.synchronize { @cut = false }
      end

      def close
        @lock.synchronize do
          @closed = true
          @changed.broadcast
        end
        close_socket(@server)
        @acceptor.join(5) || @acceptor.kill
        cut
        @threads.each { |thread| thread.join(5) || thread.kill }
      end

      private

      def accept_loop
        until @closed
          client = begin
            @server.accept
          rescue IOError, SystemCallError
            break
          end
          if @lock.synchronize { @cut }
            close_socket(client)
            next
          end
          connect(client)
        end
      end

      def connect(client)
        upstream = begin
          TCPSocket.new(*@target)
        rescue SystemCallError
          close_socket(client)
          return
        end
        @lock.synchronize { @sockets.push(client, upstream) }
        @threads << pump(client, upstream, true) << pump(upstream, client, false)
      end

      # Copies from one socket to the other until either closes; requests (from the client) wait
      # while held and for the delay.
      def pump(from, to, requests)
        thread = Thread.new do
          loop do
            chunk = from.readpartial(CHUNK)
            if requests
              delay = @lock.synchronize do
                @changed.wait(@lock) while @held && !@cut && !@closed # bound: until release, cut or close
                @delay
              end
              sleep(delay) if delay > 0
            end
            to.write(chunk)
          end
        rescue IOError, SystemCallError
          close_socket(from)
          close_socket(to)
        end
        thread.report_on_exception = false
        thread
      end

      def close_socket(socket)
        socket.close unless socket.closed?
      rescue IOError, SystemCallError
        nil
      end
    end
  end
end
