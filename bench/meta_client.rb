# frozen_string_literal: true

require "socket"

module Strata
  module Bench
    # The least a correct memcached meta-protocol client does, by hand, over one TCP socket with
    # TCP_NODELAY: mg, ms, and a pipelined multi-get ended by mn. It is the yardstick for what
    # the network and the server cost, without any client library's work. One server only; no
    # deadlines or reconnects (a bench client, not a production one).
    #
    # Commands and replies follow memcached 1.6.18's protocol.txt (Debian's memcached package).
    class MetaClient
      # A reply line outside the fixed set each command accepts. The socket is closed first: after
      # an unexpected reply the stream can no longer be trusted to be in step.
      class ProtocolError < StandardError; end

      MAX_KEY_BYTES = 250
      # Memcached's text protocol ends a key at whitespace and refuses control bytes.
      BAD_KEY_BYTE = /[\x00-\x20\x7f]/
      CRLF = "\r\n"

      def initialize(host, port, connect_timeout: 0.25)
        @socket = Socket.tcp(host, port, connect_timeout: connect_timeout)
        @socket.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1)
        @socket.sync = true
      end

      # mg <key> v  ->  VA <size> / <data>  |  EN
      def get(key)
        check_key(key)
        @socket.write("mg #{key} v\r\n")
        line = read_line
        return read_data(line) if line.start_with?("VA ")
        return nil if line == "EN"

        bad_reply("mg", line)
      end

      # ms <key> <datalen> T<ttl> / <data>  ->  HD | NS. The value goes to the socket as its own
      # buffer (one writev), never concatenated.
      def set(key, value, ttl: 0)
        check_key(key)
        @socket.write("ms #{key} #{value.bytesize} T#{Integer(ttl)}\r\n", value, CRLF)
        line = read_line
        return true if line == "HD"
        # NS is "not stored". So is an out-of-memory SERVER_ERROR: memcached could not free room
        # in the value's slab class this time; it skipped the data block, so the stream is in step.
        return false if line == "NS" || line.start_with?("SERVER_ERROR out of memory")

        bad_reply("ms", line)
      end

      # One `mg <key> v k q` per key, then mn, in one write. q hides misses, k names the key of each
      # hit, and MN marks the end of the replies.
      def get_multi(keys)
        request = +""
        keys.each do |key|
          check_key(key)
          request << "mg " << key << " v k q\r\n"
        end
        request << "mn\r\n"
        @socket.write(request)
        found = {}
        loop do
          line = read_line
          break if line == "MN"
          bad_reply("mg q", line) unless line.start_with?("VA ")

          found[returned_key(line)] = read_data(line)
        end
        found
      end

      def close
        @socket.close unless @socket.closed?
      end

      private

      def check_key(key)
        return if key.bytesize <= MAX_KEY_BYTES && !key.match?(BAD_KEY_BYTE)

        raise ArgumentError, "not a memcached text-protocol key: #{key.inspect}"
      end

      # One reply line without its CRLF. Error lines (ERROR, CLIENT_ERROR, SERVER_ERROR) come back
      # like any other; each command decides which replies it accepts.
      def read_line
        line = @socket.gets(CRLF)
        unexpected("read", "connection closed by server") if line.nil?
        unexpected("read", "line without CRLF: #{line.inspect}") unless line.end_with?(CRLF)

        line.chomp(CRLF)
      end

      def bad_reply(command, line)
        unexpected(command, "unexpected reply #{line.inspect}")
      end

      def unexpected(command, detail)
        close
        raise ProtocolError, "#{command}: #{detail}"
      end

      # line is "VA <size> <flags>*"; the data block and its CRLF follow.
      def read_data(line)
        size = Integer(line.split(" ", 3)[1])
        data = @socket.read(size)
        unexpected("read", "short data block") unless data&.bytesize == size && @socket.read(2) == CRLF

        data
      end

      def returned_key(line)
        flag = line.split(" ").find { |token| token.start_with?("k") }
        bad_reply("mg k", line) unless flag

        flag[1..]
      end
    end
  end
end
