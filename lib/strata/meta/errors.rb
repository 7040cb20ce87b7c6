# frozen_string_literal: true

require "strata/errors"

module Strata
  module Meta
    # The server sent a line the parser does not expect for the command (a status outside the
    # command's list, an unknown flag, a bad number, a value block without its "\r\n"). The byte
    # stream can no longer be trusted: the connection must be closed, not reused.
    class ProtocolError < Strata::TierError; end

    # "SERVER_ERROR <message>": the server could not carry out the command; the message is the
    # server's text, e.g. "object too large for cache". For an oversized ms, memcached 1.6.18 reads
    # and discards the value and removes any old item under the key, so the stream stays in step.
    # The protocol text allows the server to close the connection after a severe one.
    class ServerError < Strata::TierError; end

    # "CLIENT_ERROR <message>" or "ERROR": the server rejected our request line or data block.
    # memcached may follow it with a second line (a bad data chunk is answered by CLIENT_ERROR and
    # then ERROR), so the connection must be closed, not reused.
    class ClientError < Strata::TierError; end
  end
end
