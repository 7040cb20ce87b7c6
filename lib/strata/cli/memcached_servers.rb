# frozen_string_literal: true

require "socket"

module Strata
  module CLI
    # Each memcached server's own figures, from its text-protocol `stats` command on a
    # connection of our own: up (with the figures) or unreachable (with why). The app's view of
    # an outage is not asked here: Stats adds, from the L1 table, since when some process of the
    # host considers a server down (Meta::HostOutages); the recovery logs stay per process.
    class MemcachedServers
      FIGURES = %w[curr_items bytes limit_maxbytes get_hits get_misses evictions curr_connections uptime].freeze
      # Seconds to connect and for each reply line; the stats reply has about 80 lines.
      TIMEOUT = 1
      MAX_LINES = 256

      def initialize(servers, timeout: TIMEOUT)
        raise ArgumentError, "memcached: servers must be a non-empty Array of \"host:port\"" unless servers.is_a?(Array) && servers.any?

        @servers = servers.map(&:to_s)
        @timeout = timeout
      end

      # [{server:, state: "up", curr_items:, ...} or {server:, state: "unreachable", error:}]
      def stats
        @servers.map { |server| server_stats(server) }
      end

      # Each server as the client's Ring names it ("host:port", the weight left off), in the
      # order of #stats: the names of their records in Meta::HostOutages.
      def names
        @servers.map do |server|
          host, port = server.split(":", 3)
          "#{host}:#{Integer(port || 11_211)}"
        rescue ArgumentError
          server
        end
      end

      private

      def server_stats(server)
        host, port = server.split(":", 3)
        figures = Socket.tcp(host, Integer(port || 11_211, 10), connect_timeout: @timeout) { |socket| read_stats(socket) }
        {server: "#{host}:#{port}", state: "up", version: figures["version"]}
          .merge(FIGURES.to_h { |name| [name.to_sym, figures[name]&.then { |v| Integer(v, 10) }] })
      rescue SystemCallError, IOError, SocketError, ArgumentError => e
        {server: server, state: "unreachable", error: "#{e.class}: #{e.message}"}
      end

      def read_stats(socket)
        socket.write("stats\r\n")
        figures = {}
        MAX_LINES.times do
          raise IOError, "no reply within #{@timeout} s" unless socket.wait_readable(@timeout)

          line = socket.gets&.chomp
          raise IOError, "connection closed" unless line
          return figures if line == "END"
          raise IOError, "stats: #{line}" unless line.start_with?("STAT ")

          _, name, value = line.split(" ", 3)
          figures[name] = value
        end
        raise IOError, "stats not ended by END"
      end
    end
  end
end
