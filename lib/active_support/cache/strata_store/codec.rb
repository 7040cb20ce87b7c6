# frozen_string_literal: true

require "zlib"
require "active_support/cache"
require "strata/entry"
require "strata/transaction_tags"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # Turns cache entries into Strata entry bytes (Strata::Entry) and back. Strings (UTF-8,
      # binary, US-ASCII) and nil are stored as they are; other values go through the serializer:
      # Marshal, ActiveSupport's MessagePack serializer, or an object the app gives. An entry names
      # its serializer, so a store reads entries written with Marshal or MessagePack whatever its own
      # serializer is. Counters are bare ASCII decimal, as the tier's incr leaves them.
      #
      # With a coder (Rails' coder: option; dump, load and optionally dump_compressed), the coder
      # dumps the whole ActiveSupport entry, whatever its value, and compresses it if it can: its
      # bytes are the payload, behind the same header (expiry and version, which the tiers and the
      # hit path read), so every tier still holds one encoding. Only a store with a coder reads
      # such entries; for the others they are a miss.
      #
      # A stamped entry that depends on a tag changed by a transaction still open in this thread
      # is a miss too (Strata::TransactionTags); an untagged one costs one flags test.
      #
      # Stateless after new; safe to share between threads.
      class Codec
        # What a counter looks like: bare decimal that fits a tier counter (unsigned 64-bit).
        COUNTER = /\A(?:0|[1-9]\d{0,19})\z/
        MAX_COUNTER = 2**64 - 1
        # What serializers raise for a payload they can't rebuild (a class that is gone): a miss.
        LOAD_ERRORS = [DeserializationError, ArgumentError, TypeError].freeze
        MARSHAL_NAMES = [nil, :marshal_7_1, :marshal_7_0, :marshal_6_1, Marshal].freeze
        # live_value's answer when there is no value to return (nil is a value).
        MISS = Object.new.freeze

        # serializer: nil or a Marshal name Rails uses, :message_pack, or an object with dump and load.
        # compressor: responds to deflate and inflate; nil never compresses.
        # coder: nil, or an object with dump and load (and maybe dump_compressed) that takes the
        # entry's place (serializer and compressor then go unused).
        def initialize(serializer, compressor, coder = nil)
          if coder
            unless coder.respond_to?(:dump) && coder.respond_to?(:load)
              raise ArgumentError, "a coder must respond to dump and load, got #{coder.inspect}"
            end

            @coder = EntryCoder.new(coder)
            serializer = compressor = nil
          end
          @serializer, @serializer_flag = resolve(serializer)
          @compressor = compressor
        end

        # The entry bytes for entry. raw: store a counter-shaped value bare, so incr works on it.
        # compress_threshold: compress payloads this large or larger; nil never compresses.
        # stamps: the entry's dependency stamps, [[tag_id, version], ...] (a bare counter has none).
        # split: the caller's tiers take a Strata::Entry::Split, returned for an uncompressed
        # payload of at least Strata::Entry::SPLIT_MIN bytes (the header and the payload as they
        # are, not joined); otherwise, and for counters and coders, bytes.
        def dump(entry, raw, compress_threshold, stamps = Strata::Entry::NO_STAMPS, split: false)
          value = entry.value
          if raw
            value = value.to_s
            return value if value.match?(COUNTER) && value.to_i <= MAX_COUNTER
          end
          return @coder.dump(entry, compress_threshold, stamps) if @coder

          if value.nil?
            flags = Strata::Entry::NIL
            payload = Strata::Entry::EMPTY
          elsif value.instance_of?(String) && (flags = Strata::Entry.string_kind(value))
            payload = value
          else
            flags = @serializer_flag
            payload = @serializer.dump(value)
          end

          if compress_threshold && @compressor && payload.bytesize >= compress_threshold
            deflated = @compressor.deflate(payload)
            if deflated.bytesize < payload.bytesize
              payload = deflated
              flags |= Strata::Entry::COMPRESSED
            end
          end

          expires_at = Strata::Entry.milliseconds(entry.expires_at)
          if split && payload.bytesize >= Strata::Entry::SPLIT_MIN && flags & Strata::Entry::COMPRESSED == 0
            head = Strata::Entry.encode(Strata::Entry::EMPTY, flags: flags, expires_at: expires_at, version: entry.version, stamps: stamps)
            return Strata::Entry::Split.new(head, payload)
          end

          Strata::Entry.encode(payload, flags: flags, expires_at: expires_at, version: entry.version, stamps: stamps)
        end

        # The Entry in bytes, or nil when its payload can't be rebuilt. Raises Strata::CorruptError
        # for bytes that are neither an entry nor a counter.
        def load(bytes, raw)
          return Entry.new(counter_value(bytes, raw)) if Strata::Entry.counter?(bytes)

          decoded = Strata::Entry.decode(bytes)
          return nil if decoded.flags & Strata::Entry::STAMPED != 0 && Strata::TransactionTags.hides_entry?(decoded)

          value = begin
            load_value(decoded)
          rescue *LOAD_ERRORS
            return nil
          end
          version = decoded.version
          expires_at = decoded.expires_at_seconds
          # Most entries have neither; Entry.new without them is markedly cheaper.
          return Entry.new(value) unless version || expires_at

          Entry.new(value, version: version, expires_at: expires_at)
        end

        # The value in bytes when the entry is live and not of another version, else MISS. The hit
        # path needs nothing else, so it builds no Entry; expiry and version follow Entry#expired?
        # and Entry#mismatched? (Time.now, so time helpers move both paths alike).
        # none_pending: the caller has just found that no transaction has tags pending
        # (Strata::TransactionTags.current), so a stamped entry needs no second look.
        def live_value(bytes, raw, version, none_pending = false)
          return counter_value(bytes, raw) if Strata::Entry.counter?(bytes)

          # A stamped one too (the stack checked its stamps), unless a transaction open in this
          # context changed tags, which the slow path below checks.
          plain = Strata::Entry.plain_string(bytes) { none_pending || !Strata::TransactionTags.current }
          return plain if plain
          # A stale copy put back for race_condition_ttl, or a soft-stale one: the base path
          # serves and counts it.
          return MISS if Strata::Entry.put_back?(bytes) || Strata::Entry.soft_stale?(bytes)

          decoded = Strata::Entry.decode(bytes)
          return MISS if decoded.flags & Strata::Entry::STAMPED != 0 && Strata::TransactionTags.hides_entry?(decoded)

          expires_at = decoded.expires_at_seconds
          return MISS if expires_at && expires_at <= Time.now.to_f
          return MISS if version && decoded.version && decoded.version != version

          begin
            load_value(decoded)
          rescue *LOAD_ERRORS
            MISS
          end
        end

        private

        # Counters are a String when read raw (as MemCacheStore gives them), an Integer otherwise.
        def counter_value(bytes, raw)
          raw ? String.new(bytes, encoding: Encoding::UTF_8) : bytes.to_i
        end

        def load_value(decoded)
          payload = decoded.payload
          payload = inflate(payload) if decoded.compressed?
          case decoded.kind
          when Strata::Entry::NIL then nil
          when Strata::Entry::SERIALIZED then serializer_for(decoded.serializer).load(payload)
          else payload.force_encoding(decoded.string_encoding)
          end
        end

        def inflate(payload)
          @compressor.inflate(payload)
        rescue Zlib::Error => error
          raise Strata::CorruptError, "compressed payload: #{error.message}"
        end

        def serializer_for(flag)
          case flag
          when Strata::Entry::MARSHAL then Marshal
          when Strata::Entry::MESSAGE_PACK then message_pack
          when @serializer_flag then @serializer
          when Strata::Entry::CODER then @coder || raise(DeserializationError, "the entry was written by a store with a coder")
          else raise DeserializationError, "the entry was written with a serializer this store lacks"
          end
        end

        def resolve(serializer)
          return [Marshal, Strata::Entry::MARSHAL] if MARSHAL_NAMES.include?(serializer)
          return [message_pack, Strata::Entry::MESSAGE_PACK] if serializer == :message_pack
          raise ArgumentError, "unknown serializer #{serializer.inspect}" if serializer.is_a?(Symbol)
          unless serializer.respond_to?(:dump) && serializer.respond_to?(:load)
            raise ArgumentError, "a serializer must respond to dump and load"
          end

          [serializer, Strata::Entry::CUSTOM]
        end

        # The app's coder, seen as a serializer of values: it dumps and loads whole entries (bytes
        # only: the tiers store bytes), and Codec keeps their expiry and version in its header.
        class EntryCoder
          def initialize(coder)
            @coder = coder
            @compresses = coder.respond_to?(:dump_compressed)
          end

          # The entry bytes for entry: compress_threshold as Rails' dump_compressed takes it, nil
          # when compression is off.
          def dump(entry, compress_threshold, stamps)
            payload = (compress_threshold && @compresses) ? @coder.dump_compressed(entry, compress_threshold) : @coder.dump(entry)
            raise TypeError, "the coder's dump must return a String, not #{payload.class}" unless payload.is_a?(String)

            Strata::Entry.encode(payload, flags: Strata::Entry::CODER,
              expires_at: Strata::Entry.milliseconds(entry.expires_at), version: entry.version, stamps: stamps)
          end

          # The value of the entry the coder loads from payload.
          def load(payload)
            entry = @coder.load(payload)
            raise DeserializationError, "the coder loaded a #{entry.class}, not a cache entry" unless entry.is_a?(Entry)

            entry.value
          end
        end

        # Loaded on first use: the msgpack gem is optional.
        def message_pack
          require "active_support/message_pack"
          ActiveSupport::MessagePack::CacheSerializer
        end
      end
    end
  end
end
