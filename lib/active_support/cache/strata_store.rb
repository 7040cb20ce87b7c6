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
require "active_support/cache/strata_store/fetch"
require "active_support/cache/strata_store/local_cache_middleware"
require "active_support/cache/strata_store/unobserved_reads"
require "active_support/cache/strata_store/unobserved_writes"

module ActiveSupport
  module Cache
    # = Strata cache store
    #
    # A cache store over Strata's tiers: L1, one shared-memory table per host
    # (Strata::Tiers::SharedMemory) that every process of the app on that host maps; L2, memcached
    # (Strata::Tiers::Memcached); L3, a durable SQL table (Strata::Tiers::SQL, SQLite or the app's
    # database). Use L1 where MemoryStore would do but the app runs several processes (Puma or
    # Unicorn workers, job runners) that should share one cache, with atomic counters across them
    # and no network round trip; add L2 when several hosts share; add L3 for results worth keeping
    # through memcached evictions and restarts. Reads fall through the tiers and backfill the ones
    # above; writes go through every tier, top first; deletes go bottom-up. fetch reads through
    # with single-flight (see #fetch).
    #
    #   config.cache_store = :strata_store, l1: {path: "/dev/shm/myapp.strata", size: 256.megabytes}
    #   config.cache_store = :strata_store, l1: {size: 256.megabytes},
    #     memcached: {servers: ["10.0.0.5:11211", "10.0.0.6:11211"]}
    #   config.cache_store = :strata_store, l1: {size: 256.megabytes},
    #     sql: {path: "storage/cache.sqlite3"}
    #
    # Thread and process safety: the store holds no mutable state besides error counts; the table is
    # safe to use from many threads and processes at once, and a forked child keeps using it.
    #
    # Sizing: l1: {size:} is fixed when the table file is created. Each entry costs its key, its
    # serialized value and a small header; a value larger than the table's max_value_size is not
    # stored (the write returns false and is reported). The table evicts whole segments when full.
    # Values are not compressed by default: every L1 hit would pay to inflate them.
    #
    # A tier that fails turns into a miss (or a false write), reported to ActiveSupport.error_reporter
    # with source "strata.cache"; the app's request never sees it.
    #
    # Dependency tags (docs/coherence.md): fetch and write take tags: ["bugs/42", ...]; an entry
    # is stamped with its tags' versions (for fetch, read before the block runs) and with the
    # stamps of every tagged entry read while its block runs, nested fetches included.
    # invalidate_tags("bugs/42") gives the tag a new version: every entry stamped with the old
    # one misses from then on, in this process at once.
    class StrataStore < Store
      DEFAULTS = {
        compress: false # L1 is local memory; see Sizing above
      }.freeze

      # Cache keys are at most max_key_size bytes, this many by default and at most (every tier's
      # limit: L1's table, memcached's protocol, the SQL tier's key column); longer ones become a
      # prefix, HASHED_KEY and a digest, as Rails' Store#truncate_key makes them.
      MAX_KEY_BYTES = 250
      # The smallest max_key_size: HASHED_KEY and a SHA-256 digest in hex (hash_digest_class's
      # longest in Rails) take 70 bytes, and at least 30 of the key itself stay in front.
      MIN_KEY_BYTES = 100
      HASHED_KEY = ":hash:"
      # Rails 8.1's Store#truncate_key drops the bytes of a character its cut splits, and any other
      # bytes that are not UTF-8, from the part it keeps: there keys are shortened the same way.
      # Before it (7.1 to 8.0) the cut is on the byte, as it has always been here, so the keys
      # entries are stored under stay what they were.
      SCRUBBED_CUT = Store.private_method_defined?(:truncate_key)
      # Rails 8.1 reports events (ActiveSupport.event_reporter, Rails.event); invalidate_tags
      # reports INVALIDATE_REPORTED there too. The lines before it have no reporter.
      REPORTS_EVENTS = ActiveSupport.respond_to?(:event_reporter)
      SOURCE = "strata.cache"

      def self.supports_cache_versioning?
        true
      end

      include Fetch
      prepend Strategy::LocalCache
      prepend LocalCacheMiddleware unless Strategy::LocalCache.method_defined?(:new_local_cache)
      prepend UnobservedReads
      prepend UnobservedWrites
      prepend CountedMultiReads

      # The Strata::Engine behind this store (its tiers, poller, counters and failure reports),
      # and the engine's Strata::Stack, for stats and tools.
      attr_reader :engine, :stack

      INVALIDATE_EVENT = "invalidate.strata"
      INVALIDATE_REPORTED = "strata.invalidate"
      # stamps_for's answer for a computation whose result must not be cached (Capture#spoiled).
      SPOILED = [].freeze

      # Options, besides the Store ones:
      # l1: the shared-memory table's options (Strata::Tiers::SharedMemory.new); path defaults to
      #     SharedMemory.default_path of SharedMemory.default_name: one table per app, environment
      #     and namespace.
      # memcached: {servers: ["host:port", ...], ...} for L2 (Strata::Tiers::Memcached.new).
      # sql: {path: "file.sqlite3"} or {connection_class: SomeRecord}, ... for L3
      #     (Strata::Tiers::SQL.new; loads Active Record).
      #     L1 is there when l1: is given, or when neither memcached: nor sql: is.
      # fill_wait: seconds a fetch that missed waits for another process's (or host's) fill of the
      #     same key before running its block itself (default 2; 0 turns single-flight off).
      # coherence_interval: seconds L1 keeps a copy of a tag version read from memcached or SQL
      #     (default 1): the longest another host's invalidate_tags goes unseen here. With L1
      #     over memcached and no poller, also the longest L1 keeps any entry (Stack's host_ttl),
      #     so another host's write or delete of a key is seen here within it too.
      # poll_interval: seconds between reads of the SQL tier's invalidation log by this host's
      #     poller (default 0.05; Strata::Poller), which runs with L1 over an SQL tier that
      #     writes the log. poll_listen: on PostgreSQL, also wake at its NOTIFY (default true).
      #     Where it runs, L1 keeps an entry at most Strata::Dependencies::POLLED_TTL (30 s).
      # serializer: :marshal_7_1 (Marshal, the default), :message_pack, or an object with dump/load.
      # compressor: responds to deflate/inflate (Zlib by default; nil: none); used when compress is on.
      # coder: an object with dump/load (and optionally dump_compressed) for whole entries, instead
      #     of serializer and compressor (see Codec); nil: Strata's own encoding, uncompressed.
      # max_key_size: the longest key in bytes, MIN_KEY_BYTES to MAX_KEY_BYTES (the default);
      #     longer ones are shortened with a digest (Rails 8.1's option, taken on every line).
      def initialize(options = nil)
        options = DEFAULTS.merge(options || {})
        max_key_size = checked_key_size(options.delete(:max_key_size))
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
      end

      # Add amount to the integer under name, atomically across every process sharing the table,
      # and return the new value. A missing key starts at amount (expires_in applies then); a value
      # that is not a counter (written without raw: true) gives nil, as with MemCacheStore.
      def increment(name, amount = 1, options = nil)
        count(:increment, name, amount, Integer(amount), options)
      end

      # Like increment, subtracting. A missing key starts at 0; counters never go below 0.
      def decrement(name, amount = 1, options = nil)
        count(:decrement, name, amount, -Integer(amount), options)
      end

      unless method_defined?(:read_counter)
        # Rails 8.1's Store#read_counter, for the lines before it: the Integer under name, as
        # increment, decrement and write_counter leave it (a raw read); nil when there is none.
        def read_counter(name, **options)
          options = merged_options(options).merge(raw: true)
          read(name, **options)&.to_i
        end

        # Rails 8.1's Store#write_counter, for the lines before it: value (to_i) written raw under
        # name, a counter increment and decrement then change (in the tier counters live in:
        # memcached, else L1; not in SQL).
        def write_counter(name, value, **options)
          options = merged_options(options).merge(raw: true)
          write(name, value.to_i, **options)
        end
      end

      unless method_defined?(:namespace=)
        # Rails 8.1's Store#namespace and #namespace=, for the lines before it.
        def namespace
          @options[:namespace]
        end

        # Keys are made under the new namespace from the next call on, on every path: they all
        # read it from the store's options per call. The L1 table stays the one the namespace
        # given to new chose (its default path).
        def namespace=(namespace)
          @options[:namespace] = namespace
        end
      end

      # The current versions of tags (Strings or Symbols), read now, one read per tier for all of
      # them: a Strata::TagVersions for fetch's, write's or write_multi's `as_of:`, which stamps
      # the entry with these versions instead of those read by the call. For a value computed
      # from data loaded after this and before that call: a change committed in between makes
      # the entry miss, where versions read after the load would cover it for good.
      #
      #   as_of = Rails.cache.tag_versions(post.cache_tag)
      #   fresh = Post.includes(:comments).find(post.id)   # loaded after the versions
      #   Rails.cache.fetch(post, tags: post.cache_tag, as_of: as_of) { render(fresh) }
      def tag_versions(*tags)
        tags = tags.flatten
        ids = tag_ids(tags)
        Strata::TagVersions.new(ids.zip(@engine.versions(ids)).to_h)
      end

      # Action View's fragment path (Strata::Fragments): runs the block, the `cache` helper's read
      # of the fragment under key (a controller's combined fragment key) and, on a miss, its
      # render and write, as the computation of the fragment's entry, as #fetch runs its block:
      # the versions of its tags are read first, and what it reads inside (inner fragments,
      # fetches) is added to its stamps and to those of the computation around it. The tags:
      # those in options (tags: takes what #fetch's does) and the Strata::Model records and
      # relations in name. Yields the options the helper goes on with.
      def fragment(key, name, options)
        options = options ? options.dup : {}
        tags = fragment_tags(name, options[:tags])
        options[:tags] = tags unless tags.empty?
        merged = merged_options(options)
        capturing(normalize_key(key, merged), tags.empty? ? nil : tags, merged[:as_of]) do |capture|
          capture.loaded = [name, options[:tags]] unless tags.empty? # checked if it is written (#stamps_for)
          yield options
        end
      end

      # Gives each tag a new version: every entry stamped with an older one (written with tags:,
      # or built by a fetch that read such an entry) misses from then on. In this process the
      # next read misses; in other processes sharing the L1 table too; on other hosts within
      # poll_interval where a poller runs, else coherence_interval (docs/coherence.md). One
      # write per tier and tag, however many entries depend on it. Emits invalidate.strata with
      # tags:, versions: (how many were bumped: one per distinct tag), store: and, when
      # Strata.trace_invalidations, caller: (the calling line). False when a tier could neither
      # take a new version nor drop its old one (reported).
      #
      # Called while an Active Record transaction is open in this thread (joinable: not a
      # test's own), the bump waits for its commit and a rollback makes none; until then this
      # thread neither serves nor caches what depends on the tags (Strata::TransactionTags#defer).
      # True then.
      def invalidate_tags(*tags)
        tags = tags.flatten
        raise ArgumentError, "invalidate_tags needs at least one tag" if tags.empty?

        ids = tag_ids(tags)
        return true if Strata::TransactionTags.defer(self, tags.map(&:to_s))

        payload = {tags: tags.map(&:to_s), versions: ids.size, store: self.class.name}
        payload[:caller] = caller_locations(1, 1).first.to_s if Strata.trace_invalidations
        bumped = ActiveSupport::Notifications.instrument(INVALIDATE_EVENT, payload) do
          done = @engine.invalidate(ids)
          local_cache&.clear # it serves entries without their stamps checked
          done
        end
        # Once bumped (a deferred bump reports when its transaction commits); the event's
        # source_location is the caller's line (caller_depth 2).
        ActiveSupport.event_reporter&.notify(INVALIDATE_REPORTED, {tags: payload[:tags], versions: ids.size}, caller_depth: 2) if REPORTS_EVENTS
        bumped
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
      def read_entry(key, event: nil, raw: false, **)
        bytes = read_bytes(key, event)
        return nil unless bytes

        entry = failsafe(nil) { @codec.load(bytes, raw) }
        served_put_back(key, event) if entry && Strata::Entry.put_back?(bytes) && !entry.expired?
        entry
      end

      # A live entry that Rails' fetch put back for race_condition_ttl was served as the value of
      # key: a stale hit (Strata::Counters), stale: true in the read's event and, through the
      # fetch's read-through, in its cache_fetch_hit.
      def served_put_back(key, event)
        @counters.add(Strata::Counters::STALE_HITS)
        event[:stale] = true if event
        through = @engine.current_read_through(key)
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

      # The bytes under key: through the read-through of key when a fetch of it runs in this fiber
      # (Strata::ReadThrough#get: its first answer, until this fiber wrote or deleted key itself).
      def stack_read(key, event)
        through = @engine.current_read_through(key)
        @engine.noted(key, through ? through.get(event) : @stack.get(key, event))
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

        store_payload(key, payload, options[:unless_exist], write_ttl(options[:expires_in], options[:race_condition_ttl], options[:raw]))
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

      # Whether options' tags: name a tag a transaction open in this thread changed: the fetch
      # then runs as with force: true (no read), and its write is withheld (#write_entry). nil
      # (not hidden either) when there are tags and no transaction has any pending.
      def hidden_by_transaction?(options)
        tags = options[:tags]
        return false unless tags

        Strata::TransactionTags.current ? Strata::TransactionTags.hides_ids?(tag_ids(tags)) : nil
      end

      # Whether an entry with stamps may be stored. Not when a transaction open in this thread
      # changed one of their tags (Strata::TransactionTags), nor when they are more than an entry
      # holds (Strata::Entry::MAX_STAMPS): a computation that read entries of that many tags. That
      # one is reported (Strata::TooManyStampsError) and not cached: an entry without all of its
      # dependencies would outlive their invalidation.
      def storable?(key, stamps)
        return false if stamps.equal?(SPOILED) || Strata::TransactionTags.hides?(stamps)
        return true if stamps.size <= Strata::Entry::MAX_STAMPS

        report_failure(Strata::TooManyStampsError.new("#{key}: #{stamps.size} dependency stamps, an entry holds at most " \
          "#{Strata::Entry::MAX_STAMPS}; not cached"))
        false
      end

      # A value that depends on changes a transaction open in this thread has not committed is
      # not cached (Strata::TransactionTags): a fetch's result is left unwritten; a write deletes
      # the key, whose old value may not carry the tag. False: nothing was stored.
      def withheld(key)
        delete_entry(key) unless @engine.current_state&.capture&.for?(key)
        false
      end

      # Runs the block as the computation of the entries under keys (Strata::Engine#capturing),
      # stamped with the versions of tags, read now (before the block, so that an invalidation
      # during it makes the entry miss), or those in as_of: a Strata::TagVersions read earlier
      # (#tag_versions).
      def capturing(keys, tags, as_of = nil, &block)
        @engine.capturing(keys, tags ? stamps_of(tags, as_of) : Strata::Entry::NO_STAMPS, &block)
      end

      # The stamps the entry written under key carries: the computation's whose result it is;
      # during the read-through of key, before its block (Rails putting the stale entry back for
      # race_condition_ttl), those of the entry it read; else the versions of tags in as_of, or
      # their current versions (a write's versions are read when it is called).
      def stamps_for(key, tags, as_of = nil)
        capture = @engine.current_state&.capture
        if capture&.for?(key)
          if (loaded = capture.loaded) # a fragment's records: checked once, when it is written
            capture.loaded = nil
            capture.spoil! if changed_since_loaded?(*loaded)
          end
          return capture.spoiled ? SPOILED : capture.stamps
        end
        if (words = @engine.current_read_through(key)&.read_stamps)
          return words.each_slice(2).to_a
        end
        return Strata::Entry::NO_STAMPS unless tags

        stamps_of(tags, as_of)
      end

      # The tag of a Strata::Model record ("posts/42"; nil unsaved), or the collection tag of a
      # relation or class of such a model ("posts"); nil for anything else. Strata::Model is not
      # loaded for this: without it, nothing is one.
      def model_tag(object)
        return nil if Strata.autoload?(:Model)

        if object.is_a?(Strata::Model)
          object.id && object.cache_tag
        elsif object.is_a?(Class)
          object.cache_tag if object.include?(Strata::Model)
        elsif object.respond_to?(:klass) && object.respond_to?(:to_sql) # an Active Record relation
          object.klass.cache_tag if object.klass.include?(Strata::Model)
        end
      end

      # Whether a Strata::Model record in a fragment's name or tags changed since it was loaded:
      # its updated_at in the database, read now that the fragment's stamps are read, is not the
      # one it was loaded with. The fragment would then show data older than its stamps, which
      # no later invalidation would remove (the tag's change came before them), so it and the
      # computations around it are not cached (Capture#spoil!). One query per model class, when
      # a missed fragment is written; records without updated_at are not checked.
      def changed_since_loaded?(name, tags)
        return false if Strata.autoload?(:Model)

        records = (Array(name).flatten + Array(tags).flatten).select do |part|
          part.is_a?(Strata::Model) && part.persisted? && part.has_attribute?(:updated_at)
        end
        records.group_by(&:class).any? do |model, loaded|
          current = model.unscoped.where(model.primary_key => loaded.map(&:id)).pluck(model.primary_key, :updated_at).to_h
          loaded.any? { |record| current[record.id] != record.updated_at }
        end
      end

      # A fragment's tags: tags (as tags: takes them; #tag_ids reads them), and the tags of the
      # Strata::Model records and relations in name (a name, or an Array of them).
      def fragment_tags(name, tags)
        found = tags.is_a?(Array) ? tags.compact : [tags].compact
        (name.is_a?(Array) ? name.flatten : [name]).each do |part|
          tag = model_tag(part) unless part.is_a?(String) || part.is_a?(Symbol)
          found << tag if tag
        end
        found
      end

      # [[tag id, version], ...] for tags: their versions in as_of (a Strata::TagVersions), or
      # read now when as_of is nil.
      def stamps_of(tags, as_of)
        ids = tag_ids(tags)
        return Strata::Entry::NO_STAMPS if ids.empty?
        return ids.zip(@engine.versions(ids)) unless as_of
        raise TypeError, "as_of: must be a Strata::TagVersions (from tag_versions), got #{as_of.class}" unless as_of.is_a?(Strata::TagVersions)

        ids.map do |id|
          unless (version = as_of[id])
            tag = Array(tags).find { |name| Strata::Dependencies.tag_id(name.to_s) == id }
            raise ArgumentError, "as_of: has no version of the tag #{tag.inspect}; read it with tag_versions"
          end

          [id, version]
        end
      end

      # The tag ids (Strata::Engine#tag_ids) of tags: a String, a Symbol, a Strata::Model record,
      # relation or model (#model_tag), or an Array of them.
      def tag_ids(tags)
        @engine.tag_ids((tags.is_a?(Array) ? tags : [tags]).map do |tag|
          (tag.is_a?(String) || tag.is_a?(Symbol)) ? tag : (model_tag(tag) || tag)
        end)
      end

      def write_serialized_entry(key, payload, unless_exist: false, expires_in: nil, race_condition_ttl: nil, raw: false, **)
        store_payload(key, payload, unless_exist, write_ttl(expires_in, race_condition_ttl, raw))
      end

      # Stores payload under key for ttl seconds (nil: no TTL), with add when unless_exist.
      def store_payload(key, payload, unless_exist, ttl)
        through = @engine.read_through_of(key) # the write goes through it: see Strata::ReadThrough#set
        joined([key]) if @app_sql
        failsafe(false) do
          if unless_exist
            through ? through.add(payload, ttl: ttl) : @stack.add(key, payload, ttl: ttl)
          else
            through ? through.set(payload, ttl: ttl) : @stack.set(key, payload, ttl: ttl)
          end
        end
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
      def write_ttl(expires_in, race_condition_ttl, raw)
        return nil unless expires_in

        ttl = expires_in.to_f
        # A stale entry must outlive its expiry by the race window, so one fetch can put it back.
        ttl += race_condition_ttl.to_f if race_condition_ttl && !raw
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

      # keys are normalized already. Each tier deletes them all in one call, bottom-up.
      def delete_multi_entries(keys, **)
        started = Strata::Clock.monotonic_us
        joined(keys) if @app_sql
        deleted = @stack.delete_multi(keys).size
        @counters.operations(Strata::Counters::DELETE, keys.size, started)
        deleted
      end

      def read_multi_entries(names, event: nil, **options)
        state = @engine.execution_state
        none_pending = !Strata::TransactionTags.current
        namespace = namespace_of(options)
        # A plain read: the host tier's bare Strings come back as values, keys made and stamps
        # checked in the same call, unless what a read's stamps are handed to (a transaction's
        # pending tags, a computation's dependencies) is waiting for them.
        if !state.multi_unread && none_pending && @engine.idle? && (prefix = key_prefix(namespace)) &&
            (answer = @stack.get_multi_plain(names, prefix, @max_key_size, event))
          return plain_values(answer, namespace, event, options)
        end

        keys_to_names = normalized_keys(names, options, namespace)
        found = @stack.get_multi(keys_to_names.keys, event)
        found.each { |key, bytes| @engine.noted(key, bytes) } unless @engine.idle?
        if state.multi_unread
          state.multi_unread = false # only fetch_multi's own read reads through
          read_through_misses(keys_to_names.keys - found.keys, found, state.multi, event)
        end
        live_values(keys_to_names, found, options, none_pending)
      end

      # read_multi's answer from Stack#get_multi_plain's [values, held, rest]: values as they
      # are; held decoded (each name a plain String: no version but the option's); the rest read
      # through the stack as any read_multi reads (the host tier again, then the lower ones). No
      # transaction has tags pending (the caller asked).
      def plain_values((values, held, rest), namespace, event, options)
        unless held.empty?
          raw = options[:raw]
          version = options[:version]&.to_param
          held.each do |name, bytes|
            value = failsafe(Codec::MISS) { @codec.live_value(bytes, raw, version, true) }
            values[name] = value unless Codec::MISS.equal?(value)
          end
        end
        return values if rest.empty?

        keys_to_names = normalized_keys(rest, options, namespace)
        values.merge!(live_values(keys_to_names, @stack.get_multi(keys_to_names.keys, event), options, true))
      end

      # name => value for the names whose key found holds a live entry: Codec#live_value, as the
      # hit path reads (a plain String, a cached JSON document say, is returned without an Entry
      # built for it; the stack has checked the stamps). What is the same for every name is
      # asked once: the version (none unless given, or a name is not a String), and whether a
      # transaction open here changed tags. A failure decoding one (failsafe) is a miss for it.
      # none_pending: no transaction open here has tags pending (asked once, by the caller).
      def live_values(keys_to_names, found, options, none_pending)
        raw = options[:raw]
        version = options[:version]&.to_param
        results = {}
        keys_to_names.each do |key, name|
          next unless (bytes = found[key])

          named = version || (expanded_version(name) unless name.instance_of?(String))
          value = failsafe(Codec::MISS) { @codec.live_value(bytes, raw, named, none_pending) }
          results[name] = value unless Codec::MISS.equal?(value)
        end
        results
      end

      # The namespace options give (the store's unless they name one), a callable's answer.
      def namespace_of(options)
        namespace = options.key?(:namespace) ? options[:namespace] : @options[:namespace]
        namespace.respond_to?(:call) ? namespace.call : namespace
      end

      # What normalize_key puts before a plain String name under namespace: "namespace:", or ""
      # for none; nil when that is not ASCII (the byte-wise join would not be prefixed's).
      def key_prefix(namespace)
        return "" unless namespace

        prefix = "#{namespace}:"
        prefix if prefix.ascii_only?
      end

      # key => name for names, as normalize_key makes each key (under namespace, resolved once).
      def normalized_keys(names, options, namespace = namespace_of(options))
        keys_to_names = {}
        names.each do |name|
          # Anything but a plain String name (an Array, a record, a blank) takes normalize_key's
          # whole way: expanded, namespaced, then shortened once.
          next keys_to_names[normalize_key(name, options)] = name unless name.instance_of?(String) && !name.empty?

          key = namespace ? prefixed(name, namespace) : name
          keys_to_names[(key.bytesize <= @max_key_size) ? key : shortened(key)] = name
        end
        keys_to_names
      end

      # fetch_multi's read-through of the keys no tier held: each gets a read-through (kept in throughs until
      # fetch_multi ends, which finishes them), and what another caller filled meanwhile goes into
      # found. The host table was read for them just before (get_multi reads it first).
      def read_through_misses(keys, found, throughs, event)
        keys.sort.each do |key|
          through = throughs[key] ||= @stack.read_through(key, true)
          bytes = @engine.noted(key, through.get(event))
          found[key] = bytes if bytes
        end
      end

      # Every value is serialized before anything is written, so one that can't be leaves the cache
      # as it was. Then each tier takes them all in one call (memcached: one pipeline per server),
      # unless the write is an add (unless_exist); the read-throughs under way (a fetch's,
      # or fetch_multi's misses) go key by key, through the fill protocol.
      def write_multi_entries(hash, **options)
        started = Strata::Clock.monotonic_us
        tags = options[:tags]
        payloads = hash.each_with_object({}) do |(key, entry), kept|
          stamps = stamps_for(key, tags, options[:as_of])
          next withheld(key) unless storable?(key, stamps)

          kept[key] = serialize_entry(entry, stamps: stamps, **options)
        end
        if options[:unless_exist]
          payloads.each { |key, payload| write_serialized_entry(key, payload, **options) }
        else
          filled = payloads.select { |key, _| @engine.read_through_of(key) }
          filled.each { |key, payload| write_serialized_entry(key, payload, **options) }
          plain = filled.empty? ? payloads : payloads.except(*filled.keys)
          unless plain.empty?
            ttl = write_ttl(options[:expires_in], options[:race_condition_ttl], options[:raw])
            joined(plain.keys) if @app_sql
            stored = failsafe(false) { @stack.set_multi(plain, ttl: ttl) }
            remember_locally(plain, stored) if local_cache
          end
        end
        @counters.operations(Strata::Counters::WRITE, payloads.size, started)
        hash
      end

      # What the LocalCache layer's write_serialized_entry does, for the keys of a write that
      # went past it: the local cache keeps what was stored and forgets what was not.
      def remember_locally(payloads, stored)
        cache = local_cache
        payloads.each do |key, payload|
          (stored && stored[key]) ? cache.write_entry(key, payload) : cache.delete_entry(key)
        end
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

      # Keys are bytes for the tiers: no escaping, and the namespace is read without merging the
      # options again (the base normalize_key merges per call, which the read path can't afford).
      def normalize_key(key, options = nil)
        key = expanded_key(key) unless key.instance_of?(String)
        raise ArgumentError, "cache key cannot be blank (it is #{key.nil? ? "nil" : "empty"})" if key.nil? || key.empty?

        namespace = options&.key?(:namespace) ? options[:namespace] : @options[:namespace]
        key = namespaced(key, namespace) if namespace
        return key if key.bytesize <= @max_key_size

        shortened(key)
      end

      # key (namespaced, longer than max_key_size) cut to fit with HASHED_KEY and the digest of
      # all of it: Rails 8.1's truncate_key where it has one (SCRUBBED_CUT), else on the byte.
      def shortened(key)
        digest = ActiveSupport::Digest.hexdigest(key)
        kept = key.byteslice(0, @max_key_size - HASHED_KEY.bytesize - digest.bytesize)
        if SCRUBBED_CUT
          kept.force_encoding(Encoding::UTF_8).scrub!("")
        else
          kept.force_encoding(Encoding::BINARY)
        end
        kept << HASHED_KEY << digest
      end

      # The max_key_size option's value: an Integer every tier takes, MAX_KEY_BYTES when not
      # given. Not false (Rails' "no limit"): no tier takes a key over MAX_KEY_BYTES, so a long
      # key would fail every write (reported) and never be cached; mapping it to 250 would
      # instead hide that the option asked for something else.
      def checked_key_size(size)
        return MAX_KEY_BYTES if size.nil?
        if size == false
          raise ArgumentError, "max_key_size: false (no limit) is not supported: StrataStore's tiers take keys " \
            "of at most #{MAX_KEY_BYTES} bytes, and longer ones are shortened to max_key_size"
        end
        return size if size.is_a?(Integer) && size.between?(MIN_KEY_BYTES, MAX_KEY_BYTES)

        raise ArgumentError, "max_key_size must be an Integer from #{MIN_KEY_BYTES} to #{MAX_KEY_BYTES} (bytes), got #{size.inspect}"
      end

      def namespaced(key, namespace)
        namespace = namespace.call if namespace.respond_to?(:call)
        namespace ? prefixed(key, namespace) : key
      end

      # key under namespace (already called, when it is a callable).
      def prefixed(key, namespace)
        key = key.dup.force_encoding(Encoding::UTF_8) unless key.encoding == Encoding::UTF_8 || key.ascii_only?
        "#{namespace}:#{key}"
      end

      # The base answer, without probing a plain String name for a cache_version it can't have.
      def normalize_version(key, options = nil)
        version = options && options[:version]
        version&.to_param || (expanded_version(key) unless key.instance_of?(String))
      end

      # delta is the signed change. Tier counters are unsigned, so its sign picks incr or decr. A
      # missing key starts at delta when that is positive (MemCacheStore's increment), else at 0.
      def count(event, name, amount, delta, options)
        options = merged_options(options)
        key = normalize_key(name, options)
        ttl = write_ttl(options[:expires_in], nil, true)
        instrument(event, key, amount: amount) { @engine.increment(key, delta, ttl: ttl) }
      end

      def key_matches?(key, matcher)
        key = key.dup.force_encoding(Encoding::UTF_8)
        key.force_encoding(Encoding::BINARY) unless key.valid_encoding?
        matcher.is_a?(String) ? File.fnmatch?(matcher, key, File::FNM_DOTMATCH) : key.match?(matcher)
      rescue Encoding::CompatibilityError
        false
      end

      # A glob on the key without the namespace: the namespace, its own glob characters escaped,
      # goes in front.
      def glob_matcher(glob, options)
        namespace = options[:namespace]
        namespace = namespace.call if namespace.respond_to?(:call)
        namespace ? "#{namespace.to_s.gsub(/[*?\[\]{}\\]/) { |char| "\\#{char}" }}:#{glob}" : glob
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

      # The one place a tier failure becomes a fallback (a miss, a false write): it is counted and
      # reported, and the caller carries on.
      def failsafe(fallback)
        yield
      rescue Strata::TierError, Strata::ValueTooLargeError => error
        report_failure(error)
        fallback
      end

      # Every tier failure, counted by the engine (Strata::Engine#report_failure).
      def report_failure(error, tier = nil)
        @engine.report_failure(error, tier)
      end

      # The engine's on_report, for the first failure of an outage (Strata::FailureReports):
      # logged (the store's logger, else Rails.logger) and reported to
      # ActiveSupport.error_reporter. A report after some were held back gives their number
      # (context :unreported).
      def told_failure(error, tier, held)
        server = error.server if error.respond_to?(:server)
        failure_logger&.warn("StrataStore #{tier || "-"}#{" #{server}" if server} #{error.class}: #{error.message}" \
          "#{" (#{held} more since the last report)" if held > 0}")
        ActiveSupport.error_reporter&.report(error, handled: true, severity: :warning, source: SOURCE,
          context: {tier: tier, server: server, unreported: (held if held > 0)}.compact)
      end

      # Where failures are logged: the store's logger, or Rails' when the store has none (Rails
      # gives cache stores no logger of their own).
      def failure_logger
        logger || (::Rails.logger if defined?(::Rails) && ::Rails.respond_to?(:logger))
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
