# frozen_string_literal: true

require "active_support/cache"
require "active_support/notifications"
require "strata/clock"
require "strata/counters"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # The one fetch (and fetch_multi, below): Store#fetch's contract (force, skip_nil, version,
      # race_condition_ttl, WriteOptions, the cache_read, cache_fetch_hit, cache_generate and
      # cache_write events), built here rather than on the base fetch, so that one path serves a
      # fetch whether or not anyone listens. In order:
      #
      # 1. The probe. When nobody listens and no local cache is active, the host table alone is
      #    read (Stack#get_host_plain): a live value there is the answer, counted and not timed.
      # 2. The read-through (Stack#read_through; one per key and fiber, the claim of the fetch's
      #    Strata::Computation while it runs), whose first read every later read of the key in this fiber is served:
      #    single-flight, so that when the key misses, one caller per host (through L1's host
      #    lock) and one across hosts (through a memcached lease) runs the block, and the others
      #    wait up to fill_wait for its value, or get a stale one while it refills. A live entry
      #    is a hit (cache_fetch_hit carries the read-through's stale: and waited:). An expired one is put back for
      #    race_condition_ttl, or deleted; either way, and for a missing or mismatched entry, a
      #    miss.
      # 3. The block, on a miss, as that computation (its tags' stamps and those of what it
      #    reads, Engine#capturing) until its value is written: a fill (Strata::Counters).
      #
      # Events are made only when someone listens (a subscriber or a debug logger): their
      # payloads, as Rails builds them, cost more than an L1 hit.
      module Fetch
        FETCH_HIT_EVENT = "cache_fetch_hit.active_support"
        GENERATE_EVENT = "cache_generate.active_support"
        # What the read-through of a fetch found when no tier holds the key.
        ABSENT = Object.new.freeze
        # Active Support 7.1 names the key of cache_read and cache_generate as the caller gave
        # it; from 7.2 on, normalized.
        NAMED_EVENTS = ActiveSupport.gem_version < Gem::Version.new("7.2")
        # fetch_multi's cache_read_multi names its keys and hits as given before 8.0, normalized
        # from 8.0 on; before 7.2 its write_multi runs inside it.
        NAMED_MULTI_EVENTS = ActiveSupport.gem_version < Gem::Version.new("8.0")
        WRITES_INSIDE_READ_MULTI = NAMED_EVENTS

        def fetch(name, options = nil, &block)
          unless block
            raise ArgumentError, "Missing block: Calling `Cache#fetch` with `force: true` requires a block." if options && options[:force]

            return read(name, options)
          end
          check_fail_safe_options(options) if options && (options.key?(:fail_safe) || options.key?(:fail_safe_throttle) || options.key?(:stale_while_revalidate))

          # A hit reads nothing of tags: (the entry carries its stamps), so a fetch given only
          # tags probes with the store's own options, and merges the given ones when it misses:
          # the merge (two Hash copies and the alias scan) cost a tagged hit more than its stamps.
          merged = merged_options(options) if options && !(options.size == 1 && options[:tags])
          probe = merged || @options
          # nil: no transaction has tags pending, which a stamped hit then need not ask again.
          hidden = hidden_by_transaction?(merged || options || probe)
          key = normalize_key(name, probe)
          # The same for the merged options: a version or namespace given makes probe those.
          version = normalize_version(name, probe)
          watched = observed?(FETCH_HIT_EVENT)
          local = local_cache
          unless watched || local || hidden || probe[:force]
            value = host_hit(key, probe, version, hidden.nil?)
            unless Codec::MISS.equal?(value) || UnobservedReads::SOFT_STALE.equal?(value)
              # Counted, not timed: timing it would add two clock reads to every hit.
              @read_hits.count_read_hit
              return value
            end
            # A soft-stale copy is read again without the host lock: it is answered or claimed,
            # and every fetch of the key on the host would queue on the lock meanwhile.
            probed = !UnobservedReads::SOFT_STALE.equal?(value)
          end
          started = Strata::Clock.monotonic_us
          options = merged || (options ? merged_options(options) : @options)
          return generate(name, key, options, started, watched, local, &block) if hidden || options[:force]

          @engine.reading_through(key, probed) { fetch_through(name, key, options, version, watched, local, started, &block) }
        end

        # Store#fetch_multi's contract (one cache_read_multi event with super_operation:
        # :fetch_multi and the hits, the block for each miss in the order given, skip_nil, then
        # one write_multi of what it computed), with single-flight for the misses: each name no
        # tier holds is read through as #fetch would (read_multi_entries, while its computation
        # is Computation#unread), in key order, so two fetch_multis of the same names take their
        # host locks in one order. A value another caller filled meanwhile counts as a hit; this
        # caller computes the rest as one computation, which holds their read-throughs as its
        # claims until write_multi_entries has written them (ReadThrough#finish after).
        def fetch_multi(*names)
          raise ArgumentError, "Missing block: `Cache#fetch_multi` requires a block." unless block_given?
          return {} if names.empty?

          options = merged_options(names.extract_options!)
          keys = names.map { |name| normalize_key(name, options) }
          # Hidden by a transaction's pending tags: computed and not cached (#storable?).
          read = !(options[:force] || hidden_by_transaction?(options))
          # The read-throughs of its misses (read_multi_entries), finished when it ends.
          claims = read ? {} : nil
          revalidating(claims) do
            capturing(keys, options[:tags], options[:as_of], claims) do
              writes = {}
              ordered = instrument_multi(:read_multi, NAMED_MULTI_EVENTS ? names : keys, options) do |payload|
                reads = read ? read_multi_entries(names, **options, event: payload) : {}
                ordered = names.index_with { |name| reads.fetch(name) { missed_value(name, options, writes) { yield(name) } } }
                writes.compact! if options[:skip_nil]
                payload[:hits] = NAMED_MULTI_EVENTS ? reads.keys : reads.keys.map { |name| normalize_key(name, options) }
                payload[:super_operation] = :fetch_multi
                write_multi(writes, options) if WRITES_INSIDE_READ_MULTI
                ordered
              end
              write_multi(writes, options) unless WRITES_INSIDE_READ_MULTI
              ordered
            end
          end
        end

        private

        # fetch_multi's value for name, which its read missed: the block's, noted in writes. With
        # stale_while_revalidate: or fail_safe:, a key holding an expired entry of the name's
        # version may answer it instead, unwritten: while another caller revalidates it
        # (StaleWhileRevalidate#multi_revalidation), or when the block raises or is throttled
        # (FailSafe#computed_or_last_good).
        def missed_value(name, options, writes)
          return writes[name] = yield unless options[:stale_while_revalidate] || options[:fail_safe]

          key = normalize_key(name, options)
          entry = read_entry(key, **options, fetching: true)
          entry = nil unless entry&.expired? && !entry.mismatched?(normalize_version(name, options))
          if entry && options[:stale_while_revalidate]
            stale = multi_revalidation(key, entry, options)
            return stale unless Codec::MISS.equal?(stale)
          end
          return writes[name] = yield unless entry && last_good?(entry, options[:fail_safe])

          value, computed = computed_or_last_good(key, entry, options) { yield }
          writes[name] = value if computed
          value
        end

        # Steps 2 and 3 of #fetch, the read-through of key current. watched: someone listens to
        # cache_read or cache_fetch_hit (or a debug logger); local: the active local cache.
        def fetch_through(name, key, options, version, watched, local, started, &block)
          unless watched
            value = through_hit(key, options, version, local)
            return generate(name, key, options, started, watched, local, &block) if ABSENT.equal?(value)
            return counted_hit(value, started) unless Codec::MISS.equal?(value)
          end
          entry = fetched_entry(name, key, options, version, watched)
          through = @engine.claim(key)
          return fetch_hit(name, through, options, entry, watched, started) if answered?(entry, through)

          begin
            generate(name, key, options, started, watched, local, entry, &block) # entry: the last good value, or nil
          ensure
            revalidated(key) if through&.replacing && !through.replaced
          end
        end

        # The live value the read-through of key finds; ABSENT when no tier holds key, Codec::MISS
        # when what it found is not live (or could not be read: #fetched_entry reads it again,
        # from the read-through, and reports the failure).
        def through_hit(key, options, version, local)
          # local: the active local cache, nil when there is none (then read_bytes would only
          # look again).
          bytes = local ? read_bytes(key, nil) : stack_read(key, nil)
          bytes ? @codec.live_value(bytes, options[:raw], version) : ABSENT
        rescue Strata::Error
          Codec::MISS
        end

        # The live entry under key, of version, an expired one kept for fail_safe (#expired), or
        # nil; within cache_read when watched.
        def fetched_entry(name, key, options, version, watched)
          return live_entry(key, options, version, nil) unless watched

          entry = nil
          instrument(:read, NAMED_EVENTS ? name : key, options) do |payload|
            entry = live_entry(key, options, version, payload)
            payload[:super_operation] = :fetch
            payload[:hit] = answered?(entry, @engine.claim(key))
          end
          entry
        end

        # Whether the fetch answers entry (what #live_entry gave; nil: it computes), read
        # through through: a live one, unless this caller is to revalidate it (it took the
        # claim: a stale entry kept only for fail_safe:), or a stale one another revalidates.
        def answered?(entry, through)
          return false unless entry
          return true if through&.serve_stale

          !(entry.expired? || through&.replacing)
        end

        # What the read-through holds under key when live and of version, else nil; an expired
        # entry is put back or deleted, or kept for fail_safe (#expired). event: the cache_read
        # payload, or nil.
        def live_entry(key, options, version, event)
          entry = read_entry(key, **options, event: event, fetching: true)
          return nil unless entry
          return expired(entry, key, options, version) if entry.expired?
          return nil if entry.mismatched?(version)

          entry.value # a value that no longer loads is a miss, as in Rails
          through = @engine.claim(key)
          return soft_revalidation(entry, key, options, through, event) if through&.soft_stale

          entry
        rescue DeserializationError
          nil
        end

        # An expired entry: less than race_condition_ttl ago, it is written back with expires_at
        # pushed that far ahead (readers are served it meanwhile, while this caller computes)
        # and marked (Strata::Entry.put_back!), so that whoever is served the copy, through any
        # tier, counts a stale hit (#served_put_back). A miss either way; the entry is returned,
        # left in place, when it is one fail_safe may fall back on (of version, and
        # FailSafe#last_good?), else nil, deleted unless put back.
        #
        # With stale_while_revalidate:, within its window, the entry stays: it is answered
        # while another caller revalidates it, or this caller revalidates it (#revalidation).
        def expired(entry, key, options, version)
          kept = options[:fail_safe] && !entry.mismatched?(version) && last_good?(entry, options[:fail_safe])
          if options[:stale_while_revalidate] && !entry.mismatched?(version)
            case revalidation(entry, key, options, @engine.claim(key))
            when :stale then return entry
            when :revalidate then return (kept ? entry : nil)
            end
          end
          race_ttl = options[:race_condition_ttl].to_i
          if race_ttl > 0 && Time.now.to_f - entry.expires_at <= race_ttl
            put_back = kept ? entry.dup : entry # the fallback keeps its own expires_at
            put_back.expires_at = Time.now.to_f + race_ttl
            store_entry(key, put_back, options.merge(expires_in: race_ttl * 2), true, true)
          elsif !kept
            delete_entry(key, **options)
          end
          kept ? entry : nil
        end

        # A hit's value, cache_fetch_hit made when watched: with stale: true when the value was
        # a stale one served while another caller refills (or put back for race_condition_ttl),
        # and waited: the seconds the read-through (through, the fetch's claim) waited on another
        # caller's host lock or lease.
        def fetch_hit(name, through, options, entry, watched, started)
          if watched
            if through && (through.stale || through.waited || through.put_back_served || through.serve_stale || through.soft_stale)
              found = {}
              found[:stale] = true if through.stale || through.put_back_served || through.serve_stale || through.soft_stale
              found[:waited] = through.waited if through.waited
              options = options.merge(found)
            end
            instrument(:fetch_hit, name, options)
          end
          counted_hit(entry.value, started)
        end

        # value, a hit counted and timed.
        def counted_hit(value, started)
          @counters.operation(Strata::Counters::READ_HIT, started)
          value
        end

        # The block's value on a miss (or with force), written unless it is nil and skip_nil is
        # given; within cache_generate when someone listens. The block runs as its computation
        # until the write has taken its stamps (#stamps_for); its run is a fill, and the fetch a
        # fetch_miss (Strata::Counters), timed from started. last_good: the expired entry the
        # fetch may answer instead when the block raises (FailSafe), or nil.
        def generate(name, key, options, started, watched, local, last_good = nil)
          if last_good && !Codec::MISS.equal?(value = throttled_value(key, last_good, @engine.computing))
            return value
          end

          value = capturing(key, options[:tags], options[:as_of]) do |computation|
            written = options.dup # the block may change them through WriteOptions
            value = begin
              if watched || ActiveSupport::Notifications.notifier.listening?(GENERATE_EVENT)
                instrument(:generate, NAMED_EVENTS ? name : key, written) { counted_fill { yield(name, WriteOptions.new(written)) } }
              else
                counted_fill { yield(name, WriteOptions.new(written)) }
              end
            rescue => error
              raise unless last_good

              next fell_back(key, last_good, error, options, computation) # nothing is written
            end
            recovered(key) if last_good
            unless value.nil? && written[:skip_nil]
              # The block may have subscribed. Watched, write gets the options as the block left
              # them, as from the base fetch.
              if local || write_observed?
                write(name, value, written)
              else
                # WriteOptions changes version, expires_in and expires_at only; merged again, an
                # expires_at becomes an expires_in and a negative one is reported (compared by
                # the fields, not with Hash#==, which every cold fetch would pay).
                written = merged_options(written) unless written[:expires_in].equal?(options[:expires_in]) && !written.key?(:expires_at)
                write_unobserved(name, key, value, written) # UnobservedWrites: key is normalized
              end
            end
            value
          end
          @counters.operation(Strata::Counters::FETCH_MISS, started)
          value
        end
      end
    end
  end
end
