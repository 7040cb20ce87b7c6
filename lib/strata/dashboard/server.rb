# frozen_string_literal: true

require "socket"
require "stringio"

module Strata
  class Dashboard
    # A small HTTP/1.1 server for `strata dashboard`: enough for the page and its polling, no
    # more. One request per connection (Connection: close), GET only, no request body; each
    # connection in its own thread, at most MAX_CONNECTIONS at once (more are closed unanswered);
    # a client gets READ_TIMEOUT seconds to send its request head, of at most MAX_HEAD_BYTES.
    # Ruby 3.x bundles no web server (WEBrick left the default gems in 3.0), and the gem should
    # not depend on one for a page this size.
    class Server
      MAX_CONNECTIONS = 16
      MAX_HEAD_BYTES = 16_384
      READ_TIMEOUT = 5
      REASONS = {200 => "OK", 400 => "Bad Request", 403 => "Forbidden", 404 => "Not Found", 405 => "Method Not Allowed",
                 500 => "Internal Server Error"}.freeze

      # Bad request heads, answered 400.
      class BadRequest < StandardError; end

      attr_reader :port

      # Listens on bind:port at once (port 0: one the kernel picks, see #port).
      def initialize(app, bind: "127.0.0.1", port: 0, log: nil)
        @app = app
        @log = log
        @listener = TCPServer.new(bind, port)
        @bind = bind
        @port = @listener.local_address.ip_port
        @threads = []
        @lock = Mutex.new
      end

      # Serves until #stop (from another thread or a signal handler's thread).
      def run
        loop do
          socket = begin
            @listener.accept
          rescue IOError, Errno::EBADF # #stop closed the listener
            break
          end
          serve_in_thread(socket)
        end
        @lock.synchronize { @threads.dup }.each(&:join)
      end

      def stop
        @listener.close
      rescue IOError
        nil
      end

      private

      def serve_in_thread(socket)
        @lock.synchronize do
          @threads.select!(&:alive?)
          if @threads.size >= MAX_CONNECTIONS
            socket.close
          else
            @threads << Thread.new { serve(socket) }
          end
        end
      end

      def serve(socket)
        status, headers, body = begin
          @app.call(env(read_head(socket), socket))
        rescue BadRequest => e
          [400, {"content-type" => "text/plain"}, ["#{e.message}\n"]]
        rescue => e # a failing request answers 500; the server goes on
          @log&.puts("strata dashboard: #{e.class}: #{e.message}")
          [500, {"content-type" => "text/plain"}, ["internal error\n"]]
        end
        write_response(socket, status, headers, body)
      rescue IOError, SystemCallError # the client went away
        nil
      ensure
        socket.close
      end

      # [method, target, {"HTTP_NAME" => value}], from the request line and headers.
      def read_head(socket)
        head = +""
        until head.include?("\r\n\r\n")
          raise BadRequest, "request head too large" if head.bytesize > MAX_HEAD_BYTES
          raise BadRequest, "no request within #{READ_TIMEOUT} s" unless socket.wait_readable(READ_TIMEOUT)

          chunk = socket.read_nonblock(4096, exception: false)
          raise BadRequest, "connection closed" if chunk.nil?

          head << chunk unless chunk == :wait_readable
        end
        request_line, *lines = head.split("\r\n\r\n", 2).first.split("\r\n")
        method, target, version = request_line.to_s.split(" ", 3)
        raise BadRequest, "bad request line" unless method && target&.start_with?("/") && version&.start_with?("HTTP/1.")

        headers = lines.to_h do |line|
          name, value = line.split(":", 2)
          raise BadRequest, "bad header line" unless value

          ["HTTP_#{name.strip.upcase.tr("-", "_")}", value.strip]
        end
        [method, target, headers]
      end

      def env((method, target, headers), socket)
        path, query = target.split("?", 2)
        headers.merge("REQUEST_METHOD" => method, "SCRIPT_NAME" => "", "PATH_INFO" => path, "QUERY_STRING" => query.to_s,
          "SERVER_NAME" => @bind, "SERVER_PORT" => @port.to_s, "SERVER_PROTOCOL" => "HTTP/1.1",
          "REMOTE_ADDR" => socket.remote_address.ip_address, "rack.url_scheme" => "http",
          "rack.input" => StringIO.new(+""), "rack.errors" => $stderr)
      end

      def write_response(socket, status, headers, body)
        payload = "".b
        body.each { |part| payload << part.b }
        body.close if body.respond_to?(:close)
        lines = ["HTTP/1.1 #{status} #{REASONS.fetch(status, "Status")}"]
        headers.each do |name, value|
          next if name.casecmp?("content-length") || name.casecmp?("connection")

          Array(value).each { |v| lines << "#{name}: #{v}" }
        end
        lines << "content-length: #{payload.bytesize}" << "connection: close"
        socket.write(lines.join("\r\n"), "\r\n\r\n", payload)
      end
    end
  end
end
