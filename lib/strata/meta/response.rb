# frozen_string_literal: true

require "strata/meta/errors"
require "strata/meta/lease_flags"

module Strata
  module Meta
    # Parses meta-protocol reply lines (memcached 1.6.18 protocol.txt). Pure: the connection reads
    # bytes; this module only interprets them.
    #
    # Reading a reply is two steps:
    # 1. Read one line up to "\r\n" and pass it, without the "\r\n", to Response.parse (or one of
    #    the shortcuts below for the common replies). It returns a frozen Result, or raises
    #    ServerError / ClientError for error lines and ProtocolError for anything else unexpected.
    # 2. If result.value? (a VA line), read the data block of result.value_length bytes with
    #    Wire#read_bytes, which checks the "\r\n" after it and leaves it out.
    module Response
      # One reply line, parsed. Immutable (instances are frozen).
      #
      # status: :hit (VA or HD; for ms/md/ma HD means done), :miss (EN), :not_found (NF),
      #   :not_stored (NS), :exists (EX), :noop (MN)
      # value_length: bytes in the data block that follows a VA line; nil for every other status
      # cas (c), client_flags (f), ttl (t, -1 = no expiry), size (s), last_access (l): Integers
      # hit_before (h): true or false
      # key (k): the key as bytes, base64-decoded when the server marked it with b
      # base64_key (b): the server sent the key base64-encoded
      # opaque (O): the token the request carried, as bytes
      # won (W): this client won the right to recache; stale (X): the item was invalidated;
      # lease_sent (Z): another client already holds the win
      # Flags the reply did not carry are nil (false for the one-letter W X Z b).
      Result = Struct.new(:status, :value_length, :cas, :client_flags, :ttl, :size, :last_access, :hit_before,
        :key, :base64_key, :opaque, :won, :stale, :lease_sent) do
        # A data block of value_length bytes follows this line.
        include LeaseFlags

        def value?
          !value_length.nil?
        end
      end

      STATUSES = {
        "VA" => :hit, "HD" => :hit, "EN" => :miss, "NF" => :not_found,
        "NS" => :not_stored, "EX" => :exists, "MN" => :noop
      }.freeze

      # The codes each command may answer with; anything else means the stream is out of step.
      EXPECTED = {
        mg: %w[VA HD EN].freeze,
        ms: %w[HD NS EX NF].freeze,
        md: %w[HD NF EX].freeze,
        ma: %w[VA HD NF NS EX].freeze,
        mn: %w[MN].freeze
      }.freeze

      SERVER_ERROR = "SERVER_ERROR"
      CLIENT_ERROR = "CLIENT_ERROR"
      ERROR = "ERROR"
      # A flag with a numeric token: the letter, an optional minus (t-1), up to 20 digits (u64).
      NUMERIC_FLAG = /\A[a-zA-Z]-?\d{1,20}\z/
      DIGITS = /\A\d{1,20}\z/
      VALUE_LENGTH = /\A\d{1,10}\z/

      # A reply of a bare status code (no flags), and a value reply with no flags: the common
      # answers to ms and to a plain mg, recognised without tokenising the line.
      BARE_STATUS = STATUSES.transform_keys { |code| code.b.freeze }.freeze
      VALUE_PREFIX = "VA "
      VALUE_WITH_OPAQUE = /\AVA \d{1,10} O\d{1,10}\z/
      OPAQUE_FLAG = "O"
      FRESH_VALUE = /\AVA (\d{1,10}) c(\d{1,20})\z/

      module_function

      # The status of a reply to command, like parse(line, command).status, with no allocation
      # when the line is a bare status code.
      def status(line, command)
        status = BARE_STATUS[line]
        return status if status && EXPECTED.fetch(command).include?(line)

        parse(line, command).status
      end

      # [value length, cas] of a "VA <n> c<cas>" line with no other flag: a fresh hit of mg v c
      # (a lease read that found a value nobody is refilling). Else nil (parse it).
      def fresh_value(line)
        match = FRESH_VALUE.match(line)
        match && [match[1].to_i, match[2].to_i]
      end

      # [value length, opaque] of a "VA <n> O<digits>" line with no other flag: a hit in a quiet
      # get pipeline tagged by index. Else nil (parse it). About half the cost of #parse.
      def value_with_opaque(line)
        return nil unless VALUE_WITH_OPAQUE.match?(line)

        flag = line.rindex(OPAQUE_FLAG)
        [line.byteslice(3, flag - 4).to_i, line.byteslice(flag + 1, line.bytesize - flag - 1).to_i]
      end

      # The value length of a "VA <n>" line with no flags, else nil (parse it). Checked with
      # match? and String#to_i: no MatchData on the hot path of a get.
      def plain_value_length(line)
        return nil unless line.start_with?(VALUE_PREFIX)

        digits = line.byteslice(3, line.bytesize - 3)
        VALUE_LENGTH.match?(digits) ? digits.to_i : nil
      end

      # Parses one reply line given without its "\r\n". With command (:mg, :ms, :md, :ma, :mn) a
      # status that command never answers raises ProtocolError; pass nil inside a pipeline where
      # replies of several commands interleave.
      #
      # Raises ServerError (SERVER_ERROR), ClientError (CLIENT_ERROR, ERROR) and ProtocolError
      # (anything else: unknown code, unknown or malformed flag, empty line).
      def parse(line, command = nil)
        line = line.b unless line.encoding == Encoding::BINARY
        tokens = line.split(" ")
        code = tokens[0]
        status = STATUSES[code]
        raise_error_line(line, code) if status.nil?
        if command && !EXPECTED.fetch(command).include?(code)
          raise ProtocolError, "unexpected reply #{printable(line)} to #{command}"
        end

        first_flag = 1
        value_length = nil
        if code == "VA"
          value_length = tokens[1]
          raise ProtocolError, "VA without a length: #{printable(line)}" unless value_length && VALUE_LENGTH.match?(value_length)

          value_length = value_length.to_i
          first_flag = 2
        end
        parse_flags(line, tokens, first_flag, status, value_length)
      end

      # The number in an ma data block (return_value: true).
      def counter_value(value)
        raise ProtocolError, "counter value is not a number: #{printable(value)}" unless DIGITS.match?(value)

        value.to_i
      end

      def parse_flags(line, tokens, first_flag, status, value_length)
        cas = client_flags = ttl = size = last_access = hit_before = key = opaque = nil
        won = stale = lease_sent = base64_key = false
        index = first_flag
        while index < tokens.length
          token = tokens[index]
          case token[0]
          when "c" then cas = number(line, token)
          when "f" then client_flags = number(line, token)
          when "t" then ttl = number(line, token)
          when "s" then size = number(line, token)
          when "l" then last_access = number(line, token)
          when "h" then hit_before = hit_before_flag(line, token)
          when "k" then key = token.byteslice(1, token.bytesize - 1)
          when "O" then opaque = token.byteslice(1, token.bytesize - 1)
          when "b" then base64_key = bare(line, token)
          when "W" then won = bare(line, token)
          when "X" then stale = bare(line, token)
          when "Z" then lease_sent = bare(line, token)
          else raise ProtocolError, "unknown flag #{printable(token)} in #{printable(line)}"
          end
          index += 1
        end
        # b may come after k (1.6.18 sends "k<key> b"), so decode once every flag is read.
        key = decode_key(line, key) if base64_key && key
        Result.new(status, value_length, cas, client_flags, ttl, size, last_access, hit_before, key, base64_key,
          opaque, won, stale, lease_sent).freeze
      end

      def raise_error_line(line, code)
        case code
        when SERVER_ERROR then raise ServerError, message(line, SERVER_ERROR)
        when CLIENT_ERROR then raise ClientError, message(line, CLIENT_ERROR)
        when ERROR
          # "ERROR" alone: the server did not know the command, or lost track of our data block.
          raise ClientError, "ERROR (unknown command)" if line.strip == ERROR
        end
        raise ProtocolError, "unexpected reply #{printable(line)}"
      end

      # The server's text after the prefix, as UTF-8, e.g. "object too large for cache".
      def message(line, prefix)
        line.byteslice(prefix.bytesize, 200).strip.force_encoding(Encoding::UTF_8).scrub
      end

      def number(line, token)
        raise ProtocolError, "bad number #{printable(token)} in #{printable(line)}" unless NUMERIC_FLAG.match?(token)

        token.byteslice(1, token.bytesize - 1).to_i
      end

      def hit_before_flag(line, token)
        case token
        when "h0" then false
        when "h1" then true
        else raise ProtocolError, "bad flag #{printable(token)} in #{printable(line)}"
        end
      end

      # A flag without a token: anything after the letter means the line is not what we think.
      def bare(line, token)
        raise ProtocolError, "bad flag #{printable(token)} in #{printable(line)}" unless token.bytesize == 1

        true
      end

      def decode_key(line, key)
        key.unpack1("m0")
      rescue ArgumentError
        raise ProtocolError, "key is not base64: #{printable(line)}"
      end

      # Text for an error message: valid UTF-8, at most 200 bytes of the original.
      def printable(bytes)
        bytes.byteslice(0, 200).dup.force_encoding(Encoding::UTF_8).scrub.inspect
      end

      private_class_method :parse_flags, :raise_error_line, :message, :number, :hit_before_flag, :bare, :decode_key,
        :printable
    end
  end
end
