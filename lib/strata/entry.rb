# frozen_string_literal: true

require "strata/errors"

module Strata
  # One cache entry as the byte string every tier stores (docs/architecture.md, "One encoding"). The adapter encodes it
  # once; tiers copy it around without parsing it; the adapter (and the stack, for expiry and
  # dependency stamps) decodes it.
  #
  # Layout, integers little-endian:
  #
  #   offset 0   u8   MARKER, the format version; or PUT_BACK_MARKER: the same format, for an
  #                   entry Rails' fetch put back past its expiry for race_condition_ttl (below).
  #                   Never an ASCII digit: a tier's counters are bare ASCII decimal
  #                   (memcached-style), so the first byte tells the two apart.
  #   offset 1   u8   flags: COMPRESSED, the payload KIND, the SERIALIZER, VERSIONED, STAMPED
  #   offset 2   u64  expires_at, unix milliseconds; 0 means never
  #   offset 10  u16  version length, then the version bytes (UTF-8; present when VERSIONED)
  #              u16  dependency stamp count, then count pairs of (u64 tag id, u64 tag version);
  #                   the count is 0 unless STAMPED is set, and at least 1 when it is
  #              ...  payload, to the end of the string
  #
  # STAMPED lets the stack tell a tagged entry from an untagged one with one byte at a fixed
  # offset (#stamped?), so an untagged hit pays no more than that; an untagged entry is byte for
  # byte what it was before tags existed. A reader from before tags rejects the flag as unknown:
  # for it a tagged entry is corrupt, a miss, never a value served without its check.
  #
  # A put-back entry: when Rails' fetch finds an entry expired less than race_condition_ttl ago,
  # it writes the entry back with expires_at pushed race_condition_ttl ahead and recomputes;
  # readers meanwhile are served that stale copy. The store writes it under PUT_BACK_MARKER
  # (the flag bits are all taken, and the marker is the one byte every tier carries as it is),
  # so that a reader can tell the copy from the value it replaced (Entry.put_back?). A reader built
  # before the marker existed finds no entry it knows: a miss, for the window only.
  #
  # A soft-stale copy: a stamped entry whose stamps a soft invalidation made stale but not yet
  # void (Strata::Dependencies#soft_stale?) is handed to its reader with SOFT_STALE set in its
  # marker, in a copy of its own (Entry.soft_stale). Tiers never hold one: #entry? and #stamped?
  # say no to it, so no copy of it goes up, and Entry.unmarked gives back the stored bytes.
  #
  # Decoding checks every length against the string before reading, so malformed bytes raise
  # Strata::CorruptError and never read out of bounds.
  #
  # Entry::Split holds the same bytes in two parts, the header (everything before the payload)
  # and the payload, for a tier that copies them into place itself (see Split).
  class Entry
    MARKER = 0xE1
    PUT_BACK_MARKER = 0xE3
    # Set in either marker of a soft-stale copy (see above).
    SOFT_STALE = 0x04
    # Whether a first byte frames an entry: either marker, soft-stale or not.
    FRAMED = Array.new(256) { |byte| [MARKER, PUT_BACK_MARKER].include?(byte & ~SOFT_STALE) }.freeze

    # Flags, byte 1.
    COMPRESSED = 0x01 # the payload went through the store's compressor
    KIND_MASK = 0x0E # what the payload is, before compression:
    SERIALIZED = 0x00 #   the value, dumped by the serializer named in SERIALIZER_MASK
    NIL = 0x02 #          nil; the payload is empty
    BINARY = 0x04 #       a String's bytes, ASCII-8BIT
    UTF8 = 0x06 #         a String's bytes, UTF-8
    ASCII = 0x08 #        a String's bytes, US-ASCII
    SERIALIZER_MASK = 0x30
    MARSHAL = 0x00
    MESSAGE_PACK = 0x10
    CUSTOM = 0x20 # the serializer object the store was configured with
    CODER = 0x30 # the store's coder (Rails' coder: option) dumped the whole cache entry
    VERSIONED = 0x40 # a version is present (it may be empty)
    STAMPED = 0x80 # dependency stamps follow the version (Strata::Dependencies)
    KNOWN_FLAGS = COMPRESSED | KIND_MASK | SERIALIZER_MASK | VERSIONED | STAMPED

    STRING_KINDS = {
      Encoding::BINARY => BINARY, Encoding::UTF_8 => UTF8, Encoding::US_ASCII => ASCII
    }.freeze
    KIND_ENCODINGS = STRING_KINDS.invert.freeze

    # Unix seconds (about the year 33,658) from which an expiry is stored as never: any later time
    # would overflow the u64 of milliseconds or mean nothing. The L1 table caps TTLs there too.
    NEVER_AFTER = 10**12
    MAX_VERSION_BYTES = 0xFFFF
    MAX_STAMPS = 0xFFFF
    NO_STAMPS = [].freeze
    # unpack formats for the usual stamp counts.
    STAMP_WORDS = Array.new(17) { |count| "Q<#{count * 2}".freeze }.freeze

    # Which flag bytes are well-formed: only known bits and a known kind (every serializer is).
    VALID_FLAGS = Array.new(256) do |flags|
      flags & ~KNOWN_FLAGS == 0 && (flags & KIND_MASK) <= ASCII
    end.freeze

    # The encoding of a bare String payload by flags byte: a kind of String and no other flag.
    PLAIN_ENCODINGS = Array.new(256) { |flags| KIND_ENCODINGS[flags] if flags == flags & KIND_MASK }.freeze
    # The same with STAMPED set: a bare String payload after dependency stamps.
    PLAIN_STAMPED_ENCODINGS = Array.new(256) do |flags|
      KIND_ENCODINGS[flags & KIND_MASK] if flags == (flags & KIND_MASK) | STAMPED
    end.freeze

    VERSION_AT = 10
    STAMPS_AT = 12 # when the version is empty
    HEADER_BYTES = 14 # marker, flags, expires_at, version length, stamp count
    PACK = "CCQ<S<a*S<a*"
    EMPTY = "".b.freeze
    DIGIT_0 = 0x30
    DIGIT_9 = 0x39

    # An entry's bytes as head (the header, as #encode makes it for an empty payload) and payload,
    # not yet joined: what a write hands the L1 table (Strata::Tiers::SharedMemory#set and #add),
    # which copies both parts into the item itself, so that a large String value is copied once,
    # into the table, rather than first into a joined String: a fresh 25 KB allocation per write
    # that glibc faults in again after every collection. The bytes are head + payload; they are
    # only ever stored whole, and only a store whose tiers all take a Split makes one
    # (ActiveSupport::Cache::StrataStore with L1 alone). Defined at load, as any Struct.
    Split = Struct.new(:head, :payload) do
      # The byte at index, as String#getbyte (Entry.counter? and Entry.stamped? read bytes 0 and 1).
      def getbyte(index)
        size = head.bytesize
        (index < size) ? head.getbyte(index) : payload.getbyte(index - size)
      end
    end

    # Payloads this large or larger are worth a Split: below a page, joining costs less.
    SPLIT_MIN = 4096

    class << self
      # The entry bytes for payload (a String, any encoding; its bytes are copied).
      # expires_at: unix milliseconds, 0 for never. stamps: [[tag_id, version], ...].
      def encode(payload, flags: SERIALIZED, expires_at: 0, version: nil, stamps: NO_STAMPS)
        if version
          raise ArgumentError, "cache version is longer than #{MAX_VERSION_BYTES} bytes" if version.bytesize > MAX_VERSION_BYTES
          flags |= VERSIONED
        end
        return [MARKER, flags, expires_at, version&.bytesize || 0, version || EMPTY, 0, payload].pack(PACK) if stamps.empty?

        encode_with_stamps(payload, flags, expires_at, version, stamps)
      end

      # The decoded Entry, or Strata::CorruptError when bytes are not a well-formed entry.
      def decode(bytes)
        size = bytes.bytesize
        marker = bytes.getbyte(0) if size >= HEADER_BYTES
        raise CorruptError, "not a Strata entry" unless marker && FRAMED[marker]

        flags = bytes.getbyte(1)
        raise CorruptError, "unknown entry flags #{flags}" unless VALID_FLAGS[flags]

        at = STAMPS_AT + bytes.unpack1("S<", offset: VERSION_AT)
        raise CorruptError, "entry version runs past the end" if at + 2 > size
        version = bytes.byteslice(VERSION_AT + 2, at - VERSION_AT - 2).force_encoding(Encoding::UTF_8) if flags & VERSIONED != 0

        count = bytes.unpack1("S<", offset: at)
        at += 2
        raise CorruptError, "entry stamp count #{count} disagrees with its flags" unless (count > 0) == (flags & STAMPED != 0)
        if count > 0
          raise CorruptError, "entry stamps run past the end" if at + count * 16 > size
          at += count * 16
        end

        # A stamped entry keeps its bytes for #stamps, which unpacks them only when asked (a
        # tagged hit's stamps were checked by the stack already): no copy made here.
        new(bytes.byteslice(at, size - at), flags, bytes.unpack1("Q<", offset: 2), version, (count > 0) ? bytes : nil)
      end

      # The value of entry bytes that hold a bare String (no version or compression) and never
      # expire, as a String of its encoding sharing bytes' buffer; nil for anything else, which
      # #decode then reads (or rejects). The common hit, read without building an Entry. For a
      # stamped one (its stamps checked by the caller) it yields, and gives the value only when
      # the block returns true: the caller's last word on serving it. One pass over the header
      # for both, so that a tagged hit reads it once, as an untagged one does.
      def plain_string(bytes)
        size = bytes.bytesize
        return nil unless size >= HEADER_BYTES && bytes.getbyte(0) == MARKER # a put-back entry expires

        flags = bytes.getbyte(1)
        if (encoding = PLAIN_ENCODINGS[flags])
          # 10: the version length and the stamp count, both 0, read as one word
          return nil unless bytes.unpack1("Q<", offset: 2) == 0 && bytes.unpack1("L<", offset: 10) == 0

          return bytes.byteslice(HEADER_BYTES, size - HEADER_BYTES).force_encoding(encoding)
        end

        encoding = PLAIN_STAMPED_ENCODINGS[flags]
        return nil unless encoding && bytes.unpack1("Q<", offset: 2) == 0

        # No version (the low half) and at least one stamp (the count, the high half).
        lengths = bytes.unpack1("L<", offset: 10)
        return nil unless lengths & 0xFFFF == 0 && lengths >= 0x10000

        at = HEADER_BYTES + lengths / 0x10000 * 16
        return nil unless at <= size && yield

        bytes.byteslice(at, size - at).force_encoding(encoding)
      end

      # True when bytes start like an entry (as opposed to a counter or foreign data).
      def entry?(bytes)
        bytes.getbyte(0) == MARKER || bytes.getbyte(0) == PUT_BACK_MARKER
      end

      # True when bytes are an entry with dependency stamps. Two bytes read: the untagged hit's
      # whole cost of tags (the usual marker is tested first, alone: this runs on every hit).
      def stamped?(bytes)
        if bytes.getbyte(0) == MARKER
          bytes.getbyte(1) & STAMPED != 0
        else
          bytes.getbyte(0) == PUT_BACK_MARKER && bytes.getbyte(1) & STAMPED != 0
        end
      end

      # True when bytes are an entry Rails' fetch put back past its expiry for race_condition_ttl.
      def put_back?(bytes)
        bytes.getbyte(0) == PUT_BACK_MARKER
      end

      # True when bytes are a soft-stale copy (see the class comment).
      def soft_stale?(bytes)
        marker = bytes.getbyte(0)
        marker == MARKER | SOFT_STALE || marker == PUT_BACK_MARKER | SOFT_STALE
      end

      # A soft-stale copy of the stamped entry bytes (a String read from a tier).
      def soft_stale(bytes)
        marked = bytes.dup
        marked.setbyte(0, bytes.getbyte(0) | SOFT_STALE)
        marked
      end

      # The bytes a tier holds for bytes: a copy without SOFT_STALE for a soft-stale copy, else
      # bytes.
      def unmarked(bytes)
        return bytes unless soft_stale?(bytes)

        stored = bytes.dup
        stored.setbyte(0, bytes.getbyte(0) & ~SOFT_STALE)
        stored
      end

      # bytes (a String or a Split, as #encode makes them) marked as a put-back entry, in place.
      def put_back!(bytes)
        head = bytes.is_a?(Split) ? bytes.head : bytes
        head.setbyte(0, PUT_BACK_MARKER) if head.getbyte(0) == MARKER
        bytes
      end

      # The dependency stamps of entry bytes, [[tag_id, version], ...], without decoding the
      # rest. Raises Strata::CorruptError when the header is malformed.
      def stamps(bytes)
        words = stamp_words(bytes)
        words.empty? ? NO_STAMPS : words.each_slice(2).to_a
      end

      # #stamps flat, in one Array: [tag_id, version, tag_id, version, ...] (the stack's check).
      def stamp_words(bytes)
        size = bytes.bytesize
        raise CorruptError, "not a Strata entry" unless size >= HEADER_BYTES && FRAMED[bytes.getbyte(0)]

        at = STAMPS_AT + bytes.unpack1("S<", offset: VERSION_AT)
        raise CorruptError, "entry version runs past the end" if at + 2 > size
        count = bytes.unpack1("S<", offset: at)
        raise CorruptError, "entry stamps run past the end" if at + 2 + count * 16 > size
        return NO_STAMPS if count == 0

        bytes.unpack(STAMP_WORDS[count] || "Q<#{count * 2}", offset: at + 2)
      end

      # True when bytes are a tier counter: bare ASCII decimal, as incr/decr leave them.
      def counter?(bytes)
        first = bytes.getbyte(0)
        !first.nil? && first >= DIGIT_0 && first <= DIGIT_9
      end

      # expires_at (unix ms, 0 = never) read straight from the header, without decoding the rest.
      def expires_at(bytes)
        raise CorruptError, "not a Strata entry" unless bytes.bytesize >= HEADER_BYTES && entry?(bytes)

        bytes.unpack1("Q<", offset: 2)
      end

      # The payload kind for a String stored as its own bytes, or nil when its encoding has none.
      def string_kind(string)
        STRING_KINDS[string.encoding]
      end

      # Unix milliseconds for a Float/Integer of unix seconds (nil = never). Rounds up, so an entry
      # never expires before the time it was given. A time at or past NEVER_AFTER, infinite or NaN
      # is never (the store refuses a NaN expires_in before it writes anything); one at or before
      # the epoch is already expired.
      def milliseconds(seconds)
        return 0 unless seconds && seconds < NEVER_AFTER
        return 1 unless seconds > 0

        (seconds * 1000).ceil
      end

      # The current wall-clock time in unix milliseconds; expiry outlives reboots.
      def now
        Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond)
      end

      private

      def encode_with_stamps(payload, flags, expires_at, version, stamps)
        raise ArgumentError, "an entry holds at most #{MAX_STAMPS} dependency stamps" if stamps.size > MAX_STAMPS

        [MARKER, flags | STAMPED, expires_at, version&.bytesize || 0, version || EMPTY, stamps.size, *stamps.flatten, payload]
          .pack("CCQ<S<a*S<Q<#{stamps.size * 2}a*")
      end
    end

    attr_reader :payload, :flags, :expires_at, :version

    # stamped_bytes: the whole entry's bytes when it has stamps, else nil.
    def initialize(payload, flags, expires_at, version, stamped_bytes)
      @payload = payload
      @flags = flags
      @expires_at = expires_at
      @version = version
      @stamped_bytes = stamped_bytes
    end

    # [[tag_id, version], ...]; empty for an untagged entry.
    def stamps
      return NO_STAMPS unless @stamped_bytes

      @stamps ||= Entry.stamps(@stamped_bytes).freeze
    end

    def compressed?
      @flags & COMPRESSED != 0
    end

    # SERIALIZED, NIL, BINARY, UTF8 or ASCII.
    def kind
      @flags & KIND_MASK
    end

    # The Encoding of a String payload, or nil when the payload is not a plain String.
    def string_encoding
      KIND_ENCODINGS[@flags & KIND_MASK]
    end

    # MARSHAL, MESSAGE_PACK, CUSTOM or CODER; meaningful when kind is SERIALIZED.
    def serializer
      @flags & SERIALIZER_MASK
    end

    # expires_at as Float unix seconds, or nil for never.
    def expires_at_seconds
      (@expires_at == 0) ? nil : @expires_at / 1000.0
    end

    def expired?(now_ms = Entry.now)
      @expires_at != 0 && @expires_at <= now_ms
    end
  end
end
