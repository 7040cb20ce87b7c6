# frozen_string_literal: true

require "active_support/cache"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # read_multi, write_multi and delete_multi: one call per tier for all the keys; a fetch_multi's
      # misses read through one key at a time.
      module MultiEntries
        private

        # keys are normalized already. Each tier deletes them all in one call, bottom-up.
        def delete_multi_entries(keys, **)
          started = Strata::Clock.monotonic_us
          joined(keys) if @app_sql
          deleted = @stack.delete_multi(keys).size
          @counters.operations(Strata::Counters::DELETE, keys.size, started)
          deleted
        end

        def read_multi_entries(names, event: nil, **options)
          computation = @engine.current
          unread = computation&.unread
          none_pending = !Strata::TransactionTags.current
          namespace = namespace_of(options)
          # A plain read: the host tier's bare Strings come back as values, keys made and stamps
          # checked in the same call, unless what a read's stamps are handed to (a transaction's
          # pending tags, a computation's dependencies) is waiting for them.
          if !unread && none_pending && @engine.idle? && (prefix = key_prefix(namespace)) &&
              (answer = @stack.get_multi_plain(names, prefix, @max_key_size, event))
            return plain_values(answer, namespace, event, options)
          end

          keys_to_names = normalized_keys(names, options, namespace)
          found = @stack.get_multi(keys_to_names.keys, event)
          found.each { |key, bytes| @engine.noted(key, bytes) } unless @engine.idle?
          if unread
            computation.unread = false # only fetch_multi's own read reads through
            read_through_misses(keys_to_names.keys - found.keys, found, computation.claims, event)
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
            value = if Strata::Entry.soft_stale?(bytes)
              failsafe(Codec::MISS) { soft_stale_value(key, bytes, raw, named, none_pending, options[:revalidate]) }
            else
              failsafe(Codec::MISS) { @codec.live_value(bytes, raw, named, none_pending) }
            end
            results[name] = value unless Codec::MISS.equal?(value)
          end
          results
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
            filled = payloads.select { |key, _| @engine.claim(key) }
            filled.each { |key, payload| write_serialized_entry(key, payload, **options) }
            plain = filled.empty? ? payloads : payloads.except(*filled.keys)
            unless plain.empty?
              ttl = write_ttl(options[:expires_in], options[:race_condition_ttl], options[:raw], kept_past_expiry(options))
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
      end
    end
  end
end
