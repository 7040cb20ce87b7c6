# frozen_string_literal: true

require "socket"
require "stringio"

module Strata
  # A one-connection-at-a-time HTTP/1.0 server on 127.0.0.1 around a Rack app, for tests that
  # want a request to cross a real socket and a server thread without a server gem. It reads
  # the request line and headers (no body), answers, and closes. #get is its client: it writes
  # the request and reads to EOF, so the caller is blocked in I/O while the server works.
  class TinyHTTPServer
    attr_reader :port

    def initialize(app)
      @app = app
      @server = TCPServer.new("127.0.0.1", 0)
      @port = @server.addr[1]
      @thread = Thread.new { serve }
    end

    # [status, body] of GET path.
    def get(path)
      socket = TCPSocket.new("127.0.0.1", @port)
      socket.write("GET #{path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
      head, body = socket.read.split("\r\n\r\n", 2)
      [Integer(head[/\AHTTP\/1\.0 (\d+)/, 1]), body]
    ensure
      socket&.close
    end

    def close
      @server.close
      @thread.join
    end

    private

    def serve
      loop do
        client = @server.accept
        begin
          respond(client)
        ensure
          client.close
        end
      end
    rescue IOError, Errno::EBADF
      # close: the listening socket is gone, the thread ends.
    end

    def respond(client)
      method, target = client.gets.split(" ", 3)
      path, query = target.split("?", 2)
      nil until ["\r\n", nil].include?(client.gets)
      status, headers, body = @app.call(env(method, path, query))
      client.write("HTTP/1.0 #{status} OK\r\n")
      headers.each { |name, value| client.write("#{name}: #{value}\r\n") }
      client.write("\r\n")
      body.each { |chunk| client.write(chunk) }
    ensure
      body.close if body.respond_to?(:close)
    end

    def env(method, path, query)
      {
        "REQUEST_METHOD" => method, "SCRIPT_NAME" => "", "PATH_INFO" => path, "QUERY_STRING" => query.to_s,
        "SERVER_NAME" => "127.0.0.1", "SERVER_PORT" => @port.to_s, "SERVER_PROTOCOL" => "HTTP/1.0",
        "rack.url_scheme" => "http", "rack.input" => StringIO.new(+""), "rack.errors" => $stderr
      }
    end
  end
end
