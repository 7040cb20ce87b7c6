# frozen_string_literal: true

require "digest/sha2"
require "strata/meta/errors"

module Strata
  module Meta
    # Request bytes for memcached's meta commands. Pure: no sockets, no state. One function per
    # command and one keyword per protocol flag (memcached 1.6.18 protocol.txt). Each function
    # returns a new ASCII-8BIT String ending in "\r\n", ready to write.
    #
    # Keys. A key of 1..250 bytes with no space or control byte is sent as is. Any other key is sent
    # base64-encoded with the `b` flag; the server decodes it, so both spellings name the same item.
    # memcached applies its 250-byte limit to the key token as sent, so a key whose base64 form is
    # longer than 250 bytes (one over 186 bytes with a space or control byte, or any key over 250)
    # is sent as its digest form instead: its first DIGEST_PREFIX_BYTES bytes, DIGEST_MARK and the
    # SHA-256 of the whole key in hex, itself sent as is or base64 like any key. Every client
    # derives the same token, so the item is found again; another key names the same item only if
    # it is spelt as that digest form, which takes a key made for it.
    #
    # Numbers are checked to be Integers in range before they are written, so no argument can add
    # a token or a line to the request.
    module Request
      # memcached's KEY_MAX_LENGTH, checked on the key token (base64 form included).
      MAX_KEY_BYTES = 250
      # The longest key whose base64 form fits MAX_KEY_BYTES (186 bytes encode to 248, 187 to 252).
      MAX_BASE64_KEY_BYTES = MAX_KEY_BYTES / 4 * 3
      # 1.6.18 answers "CLIENT_ERROR opaque token too long" at 32 bytes, though the text says
      # "up to 32".
      MAX_OPAQUE_BYTES = 31
      OPAQUE_INTEGER_LIMIT = 10**MAX_OPAQUE_BYTES
      # Space and control bytes end or corrupt a token: such keys go base64, such opaques raise.
      UNSAFE_TOKEN_BYTE = /[\x00-\x20\x7f]/n
      # A key's digest form is at most MAX_BASE64_KEY_BYTES long, so it fits in either spelling.
      DIGEST_MARK = ":sha256:".b.freeze
      DIGEST_PREFIX_BYTES = MAX_BASE64_KEY_BYTES - DIGEST_MARK.bytesize - 64 # 64: hex SHA-256

      # Item TTLs are 32-bit signed on the server; a negative TTL expires the item at once.
      TTL_RANGE = (-(2**31)..(2**31 - 1))
      CAS_RANGE = (0..(2**64 - 1))
      NEW_CAS_RANGE = ((2**32)..(2**63 - 1))
      # The F token is a 32-bit unsigned number; 1.6.18 silently truncates larger ones.
      CLIENT_FLAGS_RANGE = (0..(2**32 - 1))
      # ma deltas and initial values are unsigned 64-bit.
      COUNTER_RANGE = (0..(2**64 - 1))
      VALUE_BYTESIZE_RANGE = (0..(2**31 - 1))

      CRLF = "\r\n".b.freeze
      # Each request starts as a copy of its command's prefix: String.new with encoding: and
      # capacity: allocates a keyword Hash and cost a third of building an mg.
      MG = "mg ".b.freeze
      MS = "ms ".b.freeze
      MD = "md ".b.freeze
      MA = "ma ".b.freeze
      BASE64_FLAG = " b"
      # Meta no-op. The server answers MN once every earlier command on the connection has
      # answered, which ends a pipeline of quiet commands.
      MN = "mn\r\n".b.freeze

      # ms M<token> modes. :add is "E" in the protocol (not to be confused with the E flag,
      # which 1.6.18 lacks).
      MS_MODES = {set: " MS", add: " ME", replace: " MR", append: " MA", prepend: " MP"}.freeze
      # ma M<token> modes; increment is the server's default, so it adds no bytes.
      MA_MODES = {incr: "", decr: " MD"}.freeze

      module_function

      # Meta get: "mg <key> <flags>*\r\n".
      #
      # Reply flags asked for: value (v: VA <len> with a data block instead of HD), flags (f),
      # cas (c), ttl_remaining (t, -1 when none), size (s), return_key (k), hit_before (h),
      # last_access (l). no_bump (u) leaves the LRU, hit and access time alone.
      # Item changes: lease_ttl (N<ttl>: on a miss create an empty item with this TTL and answer W
      # to this caller, Z to later ones), recache_ttl (R<ttl>: answer W when the remaining TTL is
      # below this), touch_ttl (T<ttl>: set the TTL on a hit).
      # opaque (O) is echoed back; quiet (q) suppresses the EN of a miss (hits still answer).
      def mg(key, value: true, flags: true, cas: true, ttl_remaining: false, size: false, return_key: false,
        hit_before: false, last_access: false, no_bump: false, lease_ttl: nil, recache_ttl: nil, touch_ttl: nil,
        opaque: nil, quiet: false)
        buf = MG.dup
        buf << BASE64_FLAG if append_key(buf, key)
        buf << " v" if value
        buf << " f" if flags
        buf << " c" if cas
        buf << " t" if ttl_remaining
        buf << " s" if size
        buf << " k" if return_key
        buf << " h" if hit_before
        buf << " l" if last_access
        buf << " u" if no_bump
        append_number(buf, " N", lease_ttl, TTL_RANGE, :lease_ttl) unless lease_ttl.nil?
        append_number(buf, " R", recache_ttl, TTL_RANGE, :recache_ttl) unless recache_ttl.nil?
        append_number(buf, " T", touch_ttl, TTL_RANGE, :touch_ttl) unless touch_ttl.nil?
        append_opaque(buf, opaque) unless opaque.nil?
        buf << " q" if quiet
        buf << CRLF
      end

      # The request of a plain read, #mg(key, flags: false, cas: false): "mg <key> v\r\n". One
      # interpolation, no keyword arguments and no re-encoding (its bytes are the request's, in
      # BINARY or, for an ASCII key, US-ASCII-compatible UTF-8; the Wire writes bytes): every get
      # of the client goes through it, and the general builder took 0.4 us more (hot; more
      # between round trips, with the caches cold).
      def mg_value(key)
        return "mg #{key} v\r\n" if plain_key?(key)

        token, base64 = key_token(key)
        base64 ? "mg #{token} b v\r\n" : "mg #{token} v\r\n"
      end

      # The request of a lease read, #mg(key, flags: false, lease_ttl:): "mg <key> v c N<ttl>\r\n",
      # or without N when lease_ttl is nil. Built as #mg_value is: every fetch through memcached
      # starts with it.
      def mg_lease(key, lease_ttl)
        check_number(lease_ttl, TTL_RANGE, :lease_ttl) unless lease_ttl.nil?
        if plain_key?(key)
          token = key
        else
          token, base64 = key_token(key)
        end
        return "mg #{token}#{BASE64_FLAG if base64} v c\r\n" if lease_ttl.nil?

        "mg #{token}#{BASE64_FLAG if base64} v c N#{lease_ttl}\r\n"
      end

      # The header of a plain set, #ms_header(key, value_bytesize, ttl:): "ms <key> <len> T<ttl>\r\n".
      # Every set of the client goes through it. For a key that goes as is and numbers in range it
      # is one interpolation with no keyword arguments; between two round trips, with the caches
      # cold, the general builder cost 1.5 us more a set (a 30 B set takes about 30 us).
      def ms_value(key, value_bytesize, ttl)
        if plain_key?(key) && number_in?(value_bytesize, VALUE_BYTESIZE_RANGE) && number_in?(ttl, TTL_RANGE)
          return "ms #{key} #{value_bytesize} T#{ttl}\r\n"
        end

        ms_header(key, value_bytesize, ttl: ttl)
      end

      # Meta set header: "ms <key> <datalen> <flags>*\r\n".
      #
      # Only the header is built, so a value goes to the socket without being copied into the
      # request. The caller writes, in order: this header, exactly value_bytesize bytes of value,
      # then CRLF. The server reads the data block by length, so the value may hold any bytes.
      #
      # ttl (T, 0 = no expiry), flags (F, client flags stored with the item, 0 when absent),
      # cas (C: store only if the item's CAS matches; EX otherwise, NF when missing),
      # invalidate (I, with cas: a CAS older than the item's is accepted but the item is marked
      # stale), mode (M: :set, :add, :replace, :append, :prepend; :add/:replace answer NS when the
      # item is present/absent), new_cas (E: the CAS the stored item gets, chosen by the client;
      # a server without E answers CLIENT_ERROR, see ServerFeatures#explicit_cas), return_cas (c),
      # return_key (k), opaque (O), quiet (q: hides HD).
      def ms_header(key, value_bytesize, ttl: nil, flags: nil, cas: nil, invalidate: false, mode: nil,
        new_cas: nil, return_cas: false, return_key: false, opaque: nil, quiet: false)
        check_number(value_bytesize, VALUE_BYTESIZE_RANGE, :value_bytesize)
        check_number(ttl, TTL_RANGE, :ttl) unless ttl.nil?
        token, base64 = key_token(key)
        # One interpolation for what every set sends: building it token by token (a prefix copy,
        # then an append and a String per token) costs a small set visibly.
        buf = (ttl.nil? ? "ms #{token} #{value_bytesize}" : "ms #{token} #{value_bytesize} T#{ttl}")
          .force_encoding(Encoding::BINARY)
        buf << BASE64_FLAG if base64
        append_number(buf, " F", flags, CLIENT_FLAGS_RANGE, :flags) unless flags.nil?
        append_number(buf, " C", cas, CAS_RANGE, :cas) unless cas.nil?
        if invalidate
          # Without C the server ignores I; a caller passing it alone has a bug.
          raise ArgumentError, "invalidate: needs cas:" if cas.nil?

          buf << " I"
        end
        buf << MS_MODES.fetch(mode) { raise ArgumentError, "unknown ms mode #{mode.inspect}" } unless mode.nil?
        append_number(buf, " E", new_cas, CAS_RANGE, :new_cas) unless new_cas.nil?
        buf << " c" if return_cas
        buf << " k" if return_key
        append_opaque(buf, opaque) unless opaque.nil?
        buf << " q" if quiet
        buf << CRLF
      end

      # A CAS for ms's E (ms_header's new_cas:): random, so that no other write of any process
      # gives an item the same one (memcached's own count starts at 1; these are 2**32 and up).
      def new_cas
        Random.rand(NEW_CAS_RANGE)
      end

      # Meta delete: "md <key> <flags>*\r\n".
      #
      # invalidate (I) keeps the item but marks it stale and bumps its CAS: the next mg sees X and
      # W, later ones X and Z. ttl (T) sets the TTL of the stale item, the grace it may be served
      # for; the server honours it only with I. cas (C) deletes only on a match (EX otherwise).
      # return_key (k), opaque (O), quiet (q: hides HD).
      def md(key, invalidate: false, ttl: nil, cas: nil, return_key: false, opaque: nil, quiet: false)
        buf = MD.dup
        buf << BASE64_FLAG if append_key(buf, key)
        buf << " I" if invalidate
        unless ttl.nil?
          raise ArgumentError, "ttl: needs invalidate: true (the server ignores T otherwise)" unless invalidate

          append_number(buf, " T", ttl, TTL_RANGE, :ttl)
        end
        append_number(buf, " C", cas, CAS_RANGE, :cas) unless cas.nil?
        buf << " k" if return_key
        append_opaque(buf, opaque) unless opaque.nil?
        buf << " q" if quiet
        buf << CRLF
      end

      # Meta arithmetic: "ma <key> <flags>*\r\n".
      #
      # delta (D, default 1, omitted when 1), mode (:incr, or :decr which stops at 0),
      # vivify_ttl (N<ttl>: on a miss create the item with this TTL instead of answering NF),
      # initial (J: the value a created item starts at, default 0; needs vivify_ttl), ttl (T: set
      # the TTL on success), cas (C), return_value (v: VA <len> with the number as the data block),
      # return_ttl (t), return_cas (c), opaque (O; works on 1.6.18 though its text omits it for ma),
      # quiet (q: hides HD; NF, NS and EX still answer).
      def ma(key, delta: 1, mode: :incr, vivify_ttl: nil, initial: nil, ttl: nil, cas: nil, return_value: true,
        return_ttl: false, return_cas: false, opaque: nil, quiet: false)
        buf = MA.dup
        buf << BASE64_FLAG if append_key(buf, key)
        buf << MA_MODES.fetch(mode) { raise ArgumentError, "unknown ma mode #{mode.inspect}" }
        append_number(buf, " D", delta, COUNTER_RANGE, :delta) unless delta == 1
        append_number(buf, " N", vivify_ttl, TTL_RANGE, :vivify_ttl) unless vivify_ttl.nil?
        unless initial.nil?
          # The protocol defines J only together with N.
          raise ArgumentError, "initial: needs vivify_ttl:" if vivify_ttl.nil?

          append_number(buf, " J", initial, COUNTER_RANGE, :initial)
        end
        append_number(buf, " T", ttl, TTL_RANGE, :ttl) unless ttl.nil?
        append_number(buf, " C", cas, CAS_RANGE, :cas) unless cas.nil?
        buf << " v" if return_value
        buf << " t" if return_ttl
        buf << " c" if return_cas
        append_opaque(buf, opaque) unless opaque.nil?
        buf << " q" if quiet
        buf << CRLF
      end

      # Whether key is its own token: an ASCII String of 1..250 bytes with no space or control
      # byte. The check #key_token starts with, without allocating its answer.
      def plain_key?(key)
        key.is_a?(String) && key.ascii_only? && !key.empty? && key.bytesize <= MAX_KEY_BYTES && !UNSAFE_TOKEN_BYTE.match?(key)
      end

      # Appends the key token; returns true when it went base64 (the caller then adds " b").
      def append_key(buf, key)
        token, base64 = key_token(key)
        buf << token
        base64
      end

      # [the key's token, whether it is base64]: the key itself (not copied) when it can go as is.
      def key_token(key)
        raise ArgumentError, "key must be a non-empty String, got #{key.inspect}" unless key.is_a?(String) && !key.empty?

        # An ASCII-only key is its own bytes, whatever its encoding: no binary copy to check.
        bytes = (key.encoding == Encoding::BINARY || key.ascii_only?) ? key : key.b
        return [bytes, false] if bytes.bytesize <= MAX_KEY_BYTES && !UNSAFE_TOKEN_BYTE.match?(bytes)

        return [[bytes].pack("m0"), true] if bytes.bytesize <= MAX_BASE64_KEY_BYTES

        digested = digest_form(bytes)
        UNSAFE_TOKEN_BYTE.match?(digested) ? [[digested].pack("m0"), true] : [digested, false]
      end

      # The name a key too long for the protocol is stored under (see Keys above).
      def digest_form(bytes)
        bytes.byteslice(0, DIGEST_PREFIX_BYTES) << DIGEST_MARK << Digest::SHA256.hexdigest(bytes)
      end

      def append_number(buf, prefix, value, range, name)
        check_number(value, range, name)
        buf << prefix << value.to_s
      end

      def check_number(value, range, name)
        raise ArgumentError, "#{name} must be an Integer in #{range}, got #{value.inspect}" unless number_in?(value, range)
      end

      def number_in?(value, range)
        value.is_a?(Integer) && range.cover?(value)
      end

      def append_opaque(buf, opaque)
        # A pipeline's index: digits only, nothing to check but the length.
        return buf << " O" << opaque.to_s if opaque.is_a?(Integer) && opaque >= 0 && opaque < OPAQUE_INTEGER_LIMIT

        token = opaque.is_a?(Integer) ? opaque.to_s : opaque
        unless token.is_a?(String) && token.bytesize <= MAX_OPAQUE_BYTES && !UNSAFE_TOKEN_BYTE.match?(token.b)
          raise ArgumentError, "opaque must be an Integer or a String of at most #{MAX_OPAQUE_BYTES} bytes " \
            "with no space or control byte, got #{opaque.inspect}"
        end

        buf << " O" << token.b
      end

      private_class_method :plain_key?, :append_key, :key_token, :digest_form, :append_number, :check_number, :number_in?, :append_opaque
    end
  end
end
