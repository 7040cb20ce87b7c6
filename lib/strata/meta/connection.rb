# frozen_string_literal: true

require "socket"
require "io/wait"
require "strata/errors"
require "strata/fork_generation"

module Strata
  module Meta
    # One TCP connection to one memcached server, speaking raw bytes. It neither builds nor parses
    # meta commands (request.rb and response.rb do); it moves bytes under a deadline and guarantees
    # that a reply is never read by the wrong request.
    #
    # Concurrency: not thread-safe. One thread (or fiber) uses a Connection at a time; a process
    # shares several through a pool. Nothing here is shared between processes: see Fork below.
    #
    # Usage: every exchange runs inside #request, which starts the operation's deadline and raises
    # the request-in-progress flag; #write, #read_line and #read_bytes are only valid inside it.
    #
    #   conn.request do |c|
    #     c.write("mg ", key, " v\r\n")
    #     c.read_line
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
    #   everything before it reads (the server stops reading while its replies are unread). #write
    #   drains readable replies into the read buffer whenever the socket is not writable, so reads
    #   and writes share one deadline and the batch always moves. The read buffer then holds at
    #   most the replies to what was already sent.
    # - Name resolution (Addrinfo.tcp) is not covered by connect_timeout; give addresses, not
    #   names, where that matters.
    class Connection
      DEFAULTS = {
        # Seconds for the TCP handshake, counted before the operation deadline starts.
        connect_timeout: 0.5,
        # Seconds for one #request: every write and read in its block shares this deadline.
        timeout: 0.5
      }.freeze

      # Bytes asked of the kernel per read.
      READ_CHUNK = 64 * 1024
      # Strings are gathered into a write buffer of this many bytes; a longer string goes to the
      # socket as it is.
      WRITE_BUFFER = 64 * 1024
      # Consumed read-buffer bytes are dropped once this many have piled up in front.
      COMPACT_AFTER = 256 * 1024
      # A reply line longer than this means the stream is not memcached's.
      MAX_LINE = 64 * 1024
      CRLF = "\r\n"
      CR = 13
      LF = 10
      # Failures of the stream itself; each becomes a TierError naming the server.
      NETWORK_ERRORS = [SystemCallError, IOError, SocketError].freeze

      attr_reader :host, :port, :name

      # host, port: the server. options: see DEFAULTS; keys it does not own are ignored.
      def initialize(host, port, **options)
        own = DEFAULTS.merge(options.slice(*DEFAULTS.keys))
        @host = host
        @port = Integer(port)
        @name = "#{host}:#{@port}"
        @connect_timeout = own.fetch(:connect_timeout)
        @timeout = own.fetch(:timeout)
        @sock = nil
        @generation = nil
        @in_progress = false
        @deadline = nil
        @rbuf = String.new(capacity: READ_CHUNK, encoding: Encoding::BINARY)
        @rpos = 0
        @chunk = String.new(capacity: READ_CHUNK, encoding: Encoding::BINARY)
        @wbuf = String.new(capacity: WRITE_BUFFER, encoding: Encoding::BINARY)
      end

      # Runs one exchange: connects if needed, starts the deadline (timeout seconds from now),
      # yields self and returns the block's value. Raises RetryableError on timeout, TierError when
      # the connection is refused, reset or closed by the server; the socket is closed after any
      # error or interrupt so that the next request starts clean.
      def request
        ensure_connected unless @sock && @generation == ForkGeneration.current && !@in_progress
        @in_progress = true
        @deadline = now + @timeout
        result = yield self
        flush unless @wbuf.empty?
        close unless @rpos == @rbuf.bytesize # replies the block left unread would reach the next one
        @in_progress = false
        result
      ensure
        @deadline = nil
        close if @in_progress
      end

      # Writes each string in order. A string is gathered into the write buffer while the buffer
      # stays within WRITE_BUFFER bytes, so a command and a value of up to 64 KiB leave in one
      # write(2) (a write per piece cost a syscall, and on loopback a segment, each: about 2x the
      # CPU of a 25 KB set). A longer string goes to the socket as it is, never copied. While the socket
      # is not writable, replies are drained into the read buffer so that a pipelined batch cannot
      # deadlock.
      def write(*strings)
        strings.each do |str| # bound: strings.size
          flush if @wbuf.bytesize + str.bytesize > WRITE_BUFFER
          if str.bytesize <= WRITE_BUFFER
            @wbuf << ((str.encoding == Encoding::BINARY || str.ascii_only?) ? str : str.b)
          else
            write_fully(str)
          end
        end
        nil
      rescue *NETWORK_ERRORS => e
        raise lost(e)
      end

      # Sends whatever #write has gathered. #read_line, #read_bytes and #request call it.
      def flush
        return if @wbuf.empty?

        write_fully(@wbuf)
        @wbuf.clear
      rescue *NETWORK_ERRORS => e
        raise lost(e)
      end

      # The next line of the reply without its "\r\n", as a binary string.
      def read_line
        flush unless @wbuf.empty?
        scan_from = @rpos
        until (crlf = @rbuf.index(CRLF, scan_from)) # bound: each pass appends bytes that arrived before the deadline
          raise TierError.new("#{@name} sent a line longer than #{MAX_LINE} bytes", tier: :l2) if @rbuf.bytesize - @rpos > MAX_LINE

          scan_from = (@rbuf.bytesize > @rpos) ? @rbuf.bytesize - 1 : @rpos # a "\r" may end the buffer
          scan_from -= fill # fill may compact: offsets move back by the bytes it dropped
        end
        line = @rbuf.byteslice(@rpos, crlf - @rpos)
        @rpos = crlf + 2
        line
      rescue *NETWORK_ERRORS => e
        raise lost(e)
      end

      # Exactly n bytes of data followed by "\r\n" (the data block of a VA reply), as a binary string.
      def read_bytes(n)
        flush unless @wbuf.empty?
        fill while @rbuf.bytesize - @rpos < n + 2 # bound: as read_line's loop
        unless @rbuf.getbyte(@rpos + n) == CR && @rbuf.getbyte(@rpos + n + 1) == LF
          raise TierError.new("#{@name}: data block of #{n} bytes is not followed by \\r\\n", tier: :l2)
        end

        data = @rbuf.byteslice(@rpos, n)
        @rpos += n + 2
        data
      rescue *NETWORK_ERRORS => e
        raise lost(e)
      end

      # Closes the socket and forgets buffered bytes. Idempotent; safe in a forked child.
      def close
        sock = @sock
        @sock = nil
        @generation = nil
        @in_progress = false
        @rbuf.clear
        @rpos = 0
        @wbuf.clear
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
        @rbuf.clear
        @rpos = 0
        @wbuf.clear
        addr = Addrinfo.tcp(@host, @port)
        sock = Socket.new(addr.afamily, Socket::SOCK_STREAM, 0)
        sock.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1)
        if sock.connect_nonblock(addr, exception: false) == :wait_writable
          unless sock.wait_writable(@connect_timeout)
            sock.close
            raise RetryableError.new("#{@name} timed out after #{@connect_timeout}s connecting", tier: :l2)
          end
          begin
            sock.connect_nonblock(addr) # reports the handshake's outcome
          rescue Errno::EISCONN
            nil # connected
          end
        end
        @sock = sock
        @generation = ForkGeneration.current
      rescue *NETWORK_ERRORS => e
        sock&.close
        raise lost(e)
      end

      # Writes all of str. Each pass writes some bytes or waits; the wait raises at the deadline.
      # The tail handed back after a partial write is a byteslice to the end of str, which Ruby
      # shares with str rather than copies.
      def write_fully(str)
        total = str.bytesize
        written = 0
        while written < total # bound: the deadline (see above)
          rest = written.zero? ? str : str.byteslice(written, total - written)
          n = socket.write_nonblock(rest, exception: false)
          if n == :wait_writable
            wait_writable_draining
          else
            written += n
          end
        end
      end

      # Waits until the socket is writable, reading any replies that arrive meanwhile.
      def wait_writable_draining
        readable, = IO.select([socket], [socket], nil, remaining) || timed_out
        read_available if readable && !readable.empty?
      end

      # Appends at least one byte to the read buffer, waiting up to the deadline. Returns the
      # number of consumed bytes it dropped from the front (0 when it did not compact).
      def fill
        dropped = compact
        # Wait, then read: a reply is rarely there the instant a request is sent, so reading
        # first would cost an extra failed recv on almost every request.
        nil until (socket.wait_readable(remaining) || timed_out) && read_available # bound: bytes, EOF or the deadline
        dropped
      end

      # One non-blocking read into the buffer: true if bytes arrived, false if none were ready.
      # The bytes land in @chunk, whose 64 KiB capacity survives from read to read (String#clear
      # frees a string's capacity, so reading straight into @rbuf would allocate it every time).
      def read_available
        got = @sock.read_nonblock(READ_CHUNK, @chunk, exception: false)
        return false if got == :wait_readable
        raise TierError.new("#{@name} closed the connection", tier: :l2) if got.nil?

        @rbuf << @chunk
        true
      end

      def compact
        if @rpos == @rbuf.bytesize
          dropped = @rpos
          @rbuf.clear
        elsif @rpos >= COMPACT_AFTER
          dropped = @rpos
          @rbuf.slice!(0, @rpos)
        else
          return 0
        end
        @rpos = 0
        dropped
      end

      # The open socket; a block that closed the connection mid-request gets a TierError.
      def socket
        @sock || raise(TierError.new("#{@name}: not connected", tier: :l2))
      end

      # Seconds left before the deadline; raises RetryableError once it has passed.
      def remaining
        raise Strata::Error, "#{self.class} I/O outside #request" unless @deadline

        left = @deadline - now
        (left > 0) ? left : timed_out
      end

      def timed_out
        raise RetryableError.new("#{@name} timed out after #{@timeout}s", tier: :l2)
      end

      def lost(error)
        TierError.new("#{@name}: #{error.class}: #{error.message}", tier: :l2)
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end
    end
  end
end
