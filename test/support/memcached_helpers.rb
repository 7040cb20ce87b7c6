# frozen_string_literal: true

require "socket"

module Strata
  module TestSupport
    # For client tests against real memcached servers: what a server's stats say, and keys the
    # client's ring maps to a given server. keys_on names keys after the test's @prefix.
    module MemcachedHelpers
      # Seconds to connect for a stats read.
      STATS_CONNECT_TIMEOUT = 10

      # The number memcached's "stats" gives for name, on a connection of its own.
      def server_stat(server, name)
        host, port = server.split(":")
        socket = Socket.tcp(host, Integer(port), connect_timeout: STATS_CONNECT_TIMEOUT)
        socket.write("stats\r\n")
        value = nil
        200.times do # bound: stats has about 90 lines
          line = socket.gets("\r\n", chomp: true)
          break if line.nil? || line == "END"

          _, stat, number = line.split(" ")
          value = Integer(number) if stat == name
        end
        value
      ensure
        socket&.close
      end

      # A key whose primary is server (bound: 10,000 candidates; with two servers one in a handful hits).
      def key_on(client, server)
        keys_on(client, server).first || flunk("no key maps to #{server}")
      end

      # The keys among 10,000 candidates that the ring maps to server, in order.
      def keys_on(client, server, tag = "")
        (0...10_000).map { |i| "#{@prefix}#{tag}#{i}" }.select { |key| client.ring.server_for(key) == server }
      end
    end
  end
end
