# frozen_string_literal: true

require "zlib"
require "active_support"
require "active_support/cache"
require "active_support/core_ext/object/blank" # the base store's debug logging needs it
require "active_support/digest"
require "concurrent/map"
require "strata"
require "strata/counters"
require "strata/engine"
require "strata/entry"
require "strata/transaction_tags"
require "strata/tag_versions"
require "active_support/cache/strata_store/codec"
require "active_support/cache/strata_store/counted_multi_reads"
require "active_support/cache/strata_store/counting"
require "active_support/cache/strata_store/failures"
require "active_support/cache/strata_store/fail_safe"
require "active_support/cache/strata_store/stale_while_revalidate"
require "active_support/cache/strata_store/fetch"
require "active_support/cache/strata_store/keys"
require "active_support/cache/strata_store/multi_entries"
require "active_support/cache/strata_store/tags"
require "active_support/cache/strata_store/local_cache_middleware"
require "active_support/cache/strata_store/unobserved_reads"
require "active_support/cache/strata_store/unobserved_writes"

module ActiveSupport
  module Cache
    # = Strata cache store
    #
    # One store over Strata's tiers (a Strata::Engine): L1, a shared-memory table that every
    # process of the app on a host maps (Strata::Tiers::SharedMemory); L2, memcached
    # (Strata::Tiers::Memcached); L3, a durable SQL table (Strata::Tiers::SQL). Reads fall
    # through and backfill the tiers above; fetch reads through with single-flight; entries
    # written with tags: miss once invalidate_tags gave a tag a new version (docs/coherence.md).
    # A tier that fails is a miss or a false write, reported to ActiveSupport.error_reporter
    # (source "strata.cache"), never an exception in the app's request.
    #
    #   config.cache_store = :strata_store, l1: {size: 256.megabytes},
    #     memcached: {servers: ["10.0.0.5:11211"]}, sql: {path: "storage/cache.sqlite3"}
    #
    # Thread and process safe: the store keeps no mutable state but counts; a forked child keeps
    # using its tables. Every option and its default: docs/configuration.md.
    class StrataStore < Store
      DEFAULTS = {
        compress: false # L1 is local memory: every hit would pay to inflate a value
      }.freeze

      def self.supports_cache_versioning?
        true
      end

      # What this file does not hold (strata_store/*.rb):
      include Fetch        # fetch and fetch_multi, with single-flight and the block's capture
      include Tags         # tags:, as_of:, fragments, invalidate_tags
      include MultiEntries # read_multi, write_multi, delete_multi
      include Keys         # normalize_key, namespace=, max_key_size, delete_matched's matchers
      include Counting     # increment, decrement, read_counter, write_counter
      include Failures     # a tier failure: a miss or a false write, and one report
      include FailSafe     # fail_safe: a block that raises answers the last good value
      include StaleWhileRevalidate # one fetch recomputes an expired entry, the others answer it
      # The layers over the hooks: the local cache, and the hit and write paths taken when
      # nobody subscribes to their events.
      prepend Strategy::LocalCache
      prepend LocalCacheMiddleware unless Strategy::LocalCache.method_defined?(:new_local_cache)
      prepend UnobservedReads
      prepend UnobservedWrites
      prepend CountedMultiReads

      # The Strata::Engine behind this store (its tiers, poller, counters and failure reports),
      # and the engine's Strata::Stack, for stats and tools.
      attr_reader :engine, :stack

      # Options, besides the Store ones (docs/configuration.md): l1:, memcached:, sql: (the
      # tiers' options; L1 is there when l1: is given or neither other one is), fill_wait:,
      # coherence_interval:, poll_interval:, poll_listen: (Strata::Engine.new), serializer:,
      # compressor:, coder: (Codec), max_key_size: (MIN_KEY_BYTES to MAX_KEY_BYTES, the default),
      # fail_safe:, fail_safe_throttle: (FailSafe), stale_while_revalidate: (per call too),
      # stale_for: (soft invalidate_tags' window, Tags).
      def initialize(options = nil)
        options = DEFAULTS.merge(options || {})
        max_key_size = checked_key_size(options.delete(:max_key_size))
        check_fail_safe_options(options)
        @stale_for = Strata::Engine.stale_for(options.delete(:stale_for) { DEFAULT_STALE_FOR })
        l1 = options.delete(:l1)
        memcached = options.delete(:memcached)
        sql = options.delete(:sql)
        fill_wait = options.delete(:fill_wait) { Strata::Stack::DEFAULT_FILL_WAIT }
        coherence_interval = options.delete(:coherence_interval) { Strata::Dependencies::DEFAULT_COHERENCE_INTERVAL }
        polling = {poll_interval: options.delete(:poll_interval) { Strata::Poller::DEFAULT_INTERVAL },
                   poll_listen: options.delete(:poll_listen) { true }}
        @codec = build_codec(options)
        # The base store's coder would go unused: Codec encodes entries, whatever the cache format
        # version (docs/compatibility.md).
        super(options.merge(coder: nil))
        # After super: Rails 8.1's sets its own default.
        @max_key_size = max_key_size
        @engine = Strata::Engine.new(l1: l1, memcached: memcached, sql: sql, namespace: @options[:namespace], fill_wait: fill_wait,
          coherence_interval: coherence_interval, **polling,
          on_report: method(:told_failure))
        @stack = @engine.stack
        @counters = @engine.counters
        @read_hits = @counters.sink # count_read_hit, _operation_since: one C call each
        @app_sql = @engine.app_sql
        @unlisted = @engine.unlisted_tiers
        # With L1 alone every write lands in the table, whose set and add copy a
        # Strata::Entry::Split into place: a large value is copied once (Codec#dump).
        @split_writes = @stack.tier_names == [:l1]
        @fail_safe_reports = Concurrent::Map.new # key => {error class => true} (FailSafe)
      end

      # Delete every entry whose key matches matcher, and return how many were deleted. matcher is
      # a Regexp on the key without the namespace (as with MemoryStore), or a String glob (*, ?,
      # [...], \ escapes; as with RedisCacheStore). Visits every live key in the table.
      #
      # Only when every tier can list its keys (L1 and SQL; a scan of the SQL table): memcached
      # can't, so a key it holds would survive and refill L1. With memcached in the stack it
      # raises NotImplementedError, as MemCacheStore does.
      def delete_matched(matcher, options = nil)
        unless @unlisted.empty?
          raise NotImplementedError, "#{self.class.name} does not support delete_matched with tiers that can't " \
            "list their keys (#{@unlisted.join(", ")})"
        end

        options = merged_options(options)
        matcher = matcher.is_a?(String) ? glob_matcher(matcher, options) : key_matcher(matcher, options)
        instrument(:delete_matched, matcher.inspect) do
          @stack.keys.count { |key| key_matches?(key, matcher) && delete_entry(key, **options) }
        end
      end

      # Drop expired entries now rather than as the table reuses their space. How many went.
      def cleanup(options = nil)
        _instrument(:cleanup) { @stack.cleanup }
      end

      # Empty the table, for every process that shares it. False if it could not be.
      def clear(options = nil)
        @stack.clear
      end

      # The tiers' statistics, this store's failure counts and the host's counters
      # (Strata::Engine#stats).
      def stats
        @engine.stats
      end

      # Release the table mapping. The store can't be used afterwards.
      def close
        @engine.close
      end

      def inspect # :nodoc:
        "#<#{self.class.name} tiers=#{@stack.tier_names.inspect} options=#{@options.inspect}>"
      end

      private

      # The hit path: explicit keywords and no detour through deserialize_entry, to allocate as
      # little as possible per read.
      # An expired entry that fail_safe: keeps is a miss for a read, which would delete it, but
      # not for a fetch (fetching), which may fall back on it (FailSafe). A rendering fragment's
      # read of its own expired entry goes to StaleWhileRevalidate#expired_fragment.
      def read_entry(key, event: nil, raw: false, fail_safe: nil, fetching: false, stale_while_revalidate: nil, **)
        bytes = read_bytes(key, event)
        return nil unless bytes

        entry = failsafe(nil) { @codec.load(bytes, raw) }
        if entry&.expired?
          if !fetching && (fragment = rendering_fragment(key))
            return expired_fragment(fragment, key, entry, event, fail_safe, stale_while_revalidate)
          end
          return nil if fail_safe && !fetching && last_good?(entry, fail_safe)
        elsif entry && Strata::Entry.put_back?(bytes)
          served_put_back(key, event)
        elsif entry && Strata::Entry.soft_stale?(bytes)
          return nil if soft_stale_read(key, event, fetching) == :revalidate
        end
        entry
      end

      # A soft-stale entry (Strata::Entry.soft_stale?) was read under key: for a fetch, noted on
      # its read-through, and the fetch answers it or recomputes it (Fetch#live_entry). For the
      # read of a fragment that is rendering (Tags#fragment), :revalidate when it takes the
      # key's claim (a miss: it renders again, and gives the claim back when it ends). Else
      # served: a stale hit (Strata::Counters), stale: true in the read's event.
      def soft_stale_read(key, event, fetching)
        through = @engine.claim(key) if fetching
        return through.soft_stale = true if through

        computation = rendering_fragment(key)
        return :revalidate if computation && renders_again?(computation, key)

        @counters.add(Strata::Counters::STALE_HITS)
        event[:stale] = true if event
      end

      # A live entry that Rails' fetch put back for race_condition_ttl was served as the value of
      # key: a stale hit (Strata::Counters), stale: true in the read's event and, through the
      # fetch's read-through, in its cache_fetch_hit.
      def served_put_back(key, event)
        @counters.add(Strata::Counters::STALE_HITS)
        event[:stale] = true if event
        through = @engine.claim(key)
        through.put_back_served = true if through
      end

      # The stored bytes for key, through the local cache when one is active (with none active the
      # LocalCache layer would only pass the call down), read through when a fetch of key is.
      # A local cache serves the bytes it holds without the stack: their stamps are noted here (Strata::Engine#noted)
      # (it checks none: invalidate_tags clears it instead). Bytes the stack served are noted
      # twice, which adds nothing.
      def read_bytes(key, event)
        return stack_read(key, event) unless local_cache

        @engine.noted(key, read_serialized_entry(key, event: event))
      end

      # Only read_entry and the LocalCache layer call this; raw is the layer's.
      def read_serialized_entry(key, event: nil, raw: false)
        stack_read(key, event)
      end

      # The bytes under key, through the read-through of a fetch of key in this fiber
      # (Strata::Engine#get_bytes).
      def stack_read(key, event)
        @engine.get_bytes(key, event)
      end

      # The block's value; its run counted as a fill (Strata::Counters), with its time.
      def counted_fill
        started = Strata::Clock.monotonic_us
        begin
          yield
        ensure
          @counters.fill(started)
        end
      end

      # Counted as a write operation (Strata::Counters), timed.
      def write_entry(key, entry, **options)
        store_entry(key, entry, options, true)
      end

      # write_entry's work. local: false for a caller that found no local cache active
      # (UnobservedWrites): the write then skips the LocalCache layer's write_serialized_entry,
      # which would only look for one again.
      # put_back: entry is an expired one written back for race_condition_ttl (Fetch#expired).
      def store_entry(key, entry, options, local, put_back = false)
        started = Strata::Clock.monotonic_us
        stamps = stamps_for(key, options[:tags], options[:as_of])
        return withheld(key) unless storable?(key, stamps)

        payload = dump_entry(entry, options, stamps, split?(entry, local))
        Strata::Entry.put_back!(payload) if put_back
        return write_serialized_entry(key, payload, **options) if local

        store_payload(key, payload, options[:unless_exist], write_ttl(options[:expires_in], options[:race_condition_ttl], options[:raw], kept_past_expiry(options)))
      ensure
        @read_hits._operation_since(Strata::Counters::WRITE, started)
      end

      # Whether entry may go to the table as a Strata::Entry::Split (Codec#dump decides on the
      # payload): with L1 alone, for a large String, outside a local cache block (the local cache
      # keeps what is written and reads it back as bytes). Small values skip the local cache look,
      # and so does a caller that found none active (local: false, as #store_entry's).
      def split?(entry, local)
        return false unless @split_writes

        value = entry.value
        value.instance_of?(String) && value.bytesize >= Strata::Entry::SPLIT_MIN && !(local && local_cache)
      end

      def write_serialized_entry(key, payload, unless_exist: false, expires_in: nil, race_condition_ttl: nil, raw: false, **options)
        store_payload(key, payload, unless_exist, write_ttl(expires_in, race_condition_ttl, raw, kept_past_expiry(options)))
      end

      # Stores payload under key for ttl seconds (nil: no TTL), with add when unless_exist.
      # A fetch's read-through of key takes it (Strata::Engine#set_bytes).
      def store_payload(key, payload, unless_exist, ttl)
        joined([key]) if @app_sql
        failsafe(false) { @engine.set_bytes(key, payload, ttl, unless_exist) }
      end

      # With the SQL tier on the app's connections (@app_sql), a write or delete of keys made
      # while this thread has a transaction open there joins it: should it roll back, #retract
      # takes back what the tiers above SQL kept (Strata::TransactionTags.retract_on_rollback).
      # Until it commits, the write is seen through L1 and memcached by other readers
      # (docs/limits.md, "App connection").
      def joined(keys)
        connection = @app_sql.app_transaction
        Strata::TransactionTags.retract_on_rollback(connection, self, keys) if connection
      end

      # What writes and deletes of keys left in the tiers above SQL, whose transaction rolled
      # back (see #joined).
      def retract(keys)
        failsafe(nil) { @stack.retract(keys) }
      end

      # Seconds a written entry lives in the tiers, or nil: also for an infinite expires_in, or one
      # past what any tier can hold (the entry's header still expires it). NaN or a negative
      # expires_in is the caller's mistake: ArgumentError (Rails drops a negative one given per
      # call, with a report; one reaching here is the store's default).
      # kept: seconds the entry stays past its expiry for fail_safe: or stale_while_revalidate:
      # (FailSafe#kept_past_expiry).
      def write_ttl(expires_in, race_condition_ttl, raw, kept = nil)
        return nil unless expires_in

        ttl = expires_in.to_f
        # A stale entry must outlive its expiry by the race window, so one fetch can put it back,
        # and by kept, so that a fetch can answer it.
        ttl += [(race_condition_ttl.to_f if race_condition_ttl), kept].compact.max.to_f unless raw
        return ttl if ttl >= 0 && ttl < Strata::Entry::NEVER_AFTER
        return nil if ttl >= 0 # NaN fails both comparisons

        raise ArgumentError, "expires_in must be a number of seconds >= 0, got #{expires_in.inspect}" \
          "#{" (race_condition_ttl: #{race_condition_ttl.inspect})" if race_condition_ttl && !raw}"
      end

      # Counted as a delete operation (Strata::Counters), timed.
      def delete_entry(key, **)
        started = Strata::Clock.monotonic_us
        joined([key]) if @app_sql
        @engine.delete(key)
      ensure
        @read_hits._operation_since(Strata::Counters::DELETE, started)
      end

      # split: a large value may come back as a Strata::Entry::Split (only #write_entry asks, when
      # the stack is L1 alone: its set and add take one).
      # serialize_entry for write_entry, positionally: its keywords' copy of options was a Hash
      # on every write. options: write_entry's; compress and compress_threshold default to the
      # store's where absent, as serialize_entry's keywords do.
      def dump_entry(entry, options, stamps, split)
        compress = options.key?(:compress) ? options[:compress] : @options[:compress]
        threshold = options.key?(:compress_threshold) ? options[:compress_threshold] : @options[:compress_threshold]
        @codec.dump(entry, options[:raw], compress ? threshold : nil, stamps, split: split)
      end

      def serialize_entry(entry, raw: false, compress: @options[:compress], compress_threshold: @options[:compress_threshold],
        stamps: Strata::Entry::NO_STAMPS, split: false, **)
        @codec.dump(entry, raw, compress ? compress_threshold : nil, stamps, split: split)
      end

      # Only the LocalCache layer calls this, for the entries it serves to read_multi and
      # fetch_multi: their stamps count (Strata::Engine#noted, with no key: a fetch_multi's own local hits count
      # for the entries it computes, a false positive at worst).
      def deserialize_entry(payload, raw: false, **)
        payload && failsafe(nil) { @codec.load(@engine.noted(nil, payload), raw) }
      end

      # The names of the tiers that can list their keys (for delete_matched).
      # The Codec for the serializer, compressor and coder options, taken out of options. A coder
      # excludes the other two, as in every store. coder: nil stores entries without Rails' coder,
      # which Strata's encoding always does; as with Rails' pass-through coder, uncompressed.
      # Unlike the base store, a compressor is fine under cache format version 7.0: the format
      # version does not choose Strata's encoding.
      def build_codec(options)
        coded = options.key?(:coder)
        %i[serializer compressor].each do |option|
          raise ArgumentError, "Cannot specify :#{option} and :coder options together" if coded && options[option]
        end
        compressor = options.delete(:compressor) { Zlib }
        Codec.new(options.delete(:serializer), coded ? nil : compressor, options.delete(:coder))
      end
    end
  end
end

# Action View's `cache` helper over a StrataStore takes its fragment's stamps when it starts
# (Strata::Fragments), once Action View is loaded.
ActiveSupport.on_load(:action_view) do
  require "strata/fragments"
  ActionView::Helpers::CacheHelper.prepend(Strata::Fragments)
end
