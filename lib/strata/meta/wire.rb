# frozen_string_literal: true

require "strata/errors"
require "strata/strata_ext"

module Strata
  module Meta
    # The byte stream of one memcached connection, in C (ext/strata/wire.h has its state and
    # invariants). Connection attaches it to each socket it opens and yields it to the block of
    # #request; the client's code writes commands into it and reads replies out of it:
    #
    #   wire.write("mg ", key, " v\r\n")   # queued: short strings are copied into one buffer,
    #                                      # a string of 2 KiB or more (a value) never is
    #   wire.read_line                     # "VA 2" (sends what was written first)
    #   wire.read_bytes(2)                 # "hi", after checking the "\r\n" that follows it
    #
    # Methods: attach(io), detach, start(timeout), stop, write(*strings), flush, read_line,
    # read_bytes(n), unread?. Every read and write shares the deadline set by start. Errors are
    # the classes below and SystemCallError; Connection turns them into TierErrors naming the
    # server. After any error the buffers may be mid-way, and the owner must detach.
    class Wire
      class Error < Strata::Error; end

      # I/O without a socket or outside a request (between start and stop), or any call while
      # another thread's wait for a reply fills the buffer: a bug in the caller.
      class Idle < Error; end

      # A failure of the stream itself; the connection can't be reused.
      class StreamError < Error; end

      # The request's deadline passed.
      class TimedOut < StreamError; end

      # The server closed the connection.
      class Closed < StreamError; end

      # Bytes that are not memcached's framing: an endless line, a data block without "\r\n".
      class Malformed < StreamError; end
    end
  end
end
