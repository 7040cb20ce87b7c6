# frozen_string_literal: true

require "socket"
require "io/wait"
require "strata/errors"
require "strata/fork_generation"
require "strata/meta/wire"

module Strata
  module Meta
    # One TCP connection to one memcached server. It neither builds nor parses meta commands
    # (request.rb and response.rb do), and its bytes move through a Wire (wire.rb, in C); it
    # owns the socket and guarantees that a reply is never read by the wrong request.
    #
    # Concurrency: not thread-safe. One thread (or fiber) uses a Connection at a time; a process
    # shares several through a pool. Nothing here is shared between processes: see Fork below.
    #
    # Usage: every exchange runs inside #request, which starts the operation's deadline, raises
    # the request-in-progress flag and yields the Wire, whose I/O is valid only inside the block:
    #
    #   conn.request do |wire|
    #     wire.write("mg ", key, " v\r\n")
    #     wire.read_line
    #   end
    #
    # Caveats, each with its remedy:
    # - Interrupted request (timeout, exception, Thread#raise or Timeout.timeout inside the block):
    #   the flag stays up, the socket is closed on the way out and, should the interrupt land in
    #   that cleanup too, at the start of the next request. The next request always reconnects
    #   rather than read a reply meant for the one before it. A block that returns with bytes
    #   still buffered also closes the socket.
    # - Fork: the child inherits the Socket object and a dup of its descriptor, which refers to the
    #   same TCP stream as the parent's. #request compares the fork generation (Strata::ForkGeneration) with the one it connected in;
    #   on a change it closes the child's descriptor (close(2) drops only the child's reference, so
    #   the parent's stream stays open and sees no FIN; shutdown(2), which would act on the shared
    #   stream, is never called), forgets buffered bytes and the flag, and connects afresh.
    # - Pipelining: a batch larger than the socket buffers deadlocks a client that writes
    #   everything before it reads (the server stops reading while its replies are unread). The
    #   Wire drains readable replies whenever the socket is not writable, so reads and writes
    #   share one deadline and the batch always moves.
    # - Name resolution (Addrinfo.tcp) is not covered by connect_timeout; give addresses, not
    #   names, where that matters.
    class Connection
      DEFAULTS = {
        # Seconds for the TCP handshake, counted before the operation deadline starts.
        connect_timeout: 0.5,
        # Seconds for one #request: every write and read in its block shares this deadline.
        timeout: 0.5
      }.freeze

      # Failures of the stream itself; each becomes a TierError naming the server.
      NETWORK_ERRORS = [SystemCallError, IOError, SocketError, Wire::StreamError].freeze

      attr_reader :host, :port, :name

      # Raises ArgumentError naming the first of DEFAULTS' keys in options that is not a finite
      # number of seconds above 0. Client calls it too, since its connections are made lazily.
      def self.check_options(options)
        DEFAULTS.each_key do |name|
          value = options.fetch(name, DEFAULTS[name])
          next if value.is_a?(Numeric) && value.positive? && value.finite?

          raise ArgumentError, "#{name} must be a finite number of seconds above 0, got #{value.inspect}"
        end
      end

      # host, port: the server. options: see DEFAULTS; keys it does not own are ignored.
      def initialize(host, port, **options)
        own = DEFAULTS.merge(options.slice(*DEFAULTS.keys))
        @host = host
        @port = Integer(port)
        @name = "#{host}:#{@port}"
        self.class.check_options(own)
        @connect_timeout = own.fetch(:connect_timeout)
        @timeout = own.fetch(:timeout)
        @sock = nil
        @generation = nil
        @in_progress = false
        @wire = Wire.new
      end

      # Runs one exchange: connects if needed, starts the deadline (timeout seconds from now),
      # yields the Wire and returns the block's value. Raises RetryableError on timeout, TierError
      # when the connection is refused, reset or closed by the server; the socket is closed after
      # any error or interrupt so that the next request starts clean.
      def request
        ensure_connected unless @sock && @generation == ForkGeneration.current && !@in_progress
        @in_progress = true
        @wire.start(@timeout)
        result = yield @wire
        @wire.flush
        close if @wire.unread? # replies the block left unread would reach the next one
        @in_progress = false
        result
      rescue *NETWORK_ERRORS => e
        raise lost(e)
      ensure
        @wire.stop
        close if @in_progress
      end

      # Closes the socket and forgets buffered bytes. Idempotent; safe in a forked child.
      def close
        sock = @sock
        @sock = nil
        @generation = nil
        @in_progress = false
        @wire.detach
        sock&.close
        nil
      rescue IOError
        nil # already closed
      end

      def connected?
        !@sock.nil? && @generation == ForkGeneration.current
      end

      # Local TCP port of the current socket, or nil when not connected. For diagnostics.
      def local_port
        @sock&.local_address&.ip_port
      end

      private

      # Reconnects when there is no socket, when the last request was interrupted, or when this is
      # a forked child still holding its parent's socket (see Fork in the class comment).
      def ensure_connected
        close if @in_progress || (@sock && @generation != ForkGeneration.current)
        connect unless @sock
      end

      def connect
        # An interrupt inside #close could leave bytes behind; none may reach the new socket.
        @wire.detach
        addr = Addrinfo.tcp(@host, @port)
        sock = Socket.new(addr.afamily, Socket::SOCK_STREAM, 0)
        sock.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1)
        if sock.connect_nonblock(addr, exception: false) == :wait_writable
          unless sock.wait_writable(@connect_timeout)
            sock.close
            raise RetryableError.new("#{@name} timed out after #{@connect_timeout}s connecting", tier: :l2, server: @name)
          end
          begin
            sock.connect_nonblock(addr) # reports the handshake's outcome
          rescue Errno::EISCONN
            nil # connected
          end
        end
        @wire.attach(sock)
        @sock = sock
        @generation = ForkGeneration.current
      rescue *NETWORK_ERRORS => e
        sock&.close
        raise lost(e)
      end

      def lost(error)
        case error
        when Wire::TimedOut then RetryableError.new("#{@name} timed out after #{@timeout}s", tier: :l2, server: @name)
        when Wire::StreamError then TierError.new("#{@name} #{error.message}", tier: :l2, server: @name)
        else TierError.new("#{@name}: #{error.class}: #{error.message}", tier: :l2, server: @name)
        end
      end
    end
  end
end
