# frozen_string_literal: true

require "active_support/cache"
require "concurrent/map"
require "digest"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # fail_safe: (docs/coherence.md, "Fail-safe"): a fetch whose block raises answers the last
      # good value instead, when its entry expired at most fail_safe seconds ago. Such an entry
      # stays in the tiers that long past its expiry (#write_ttl), and a fetch that finds it
      # expired leaves it in place while its block runs: a write or delete of the key meanwhile
      # replaces or removes it, so the fallback is never a value the app changed since. After a
      # failure the block is not run again for that key for fail_safe_throttle seconds on this
      # host (on memcached alone: across hosts); fetches meanwhile answer the last good value.
      module FailSafe
        DEFAULT_THROTTLE = 5
        # The throttle's mark: a reserved key (a NUL byte first) in the top tier only.
        THROTTLE_PREFIX = "\x00strata:fail_safe:"
        # Failures reported at most once per key and error class until the key's block runs
        # through again; past this many keys the record starts over.
        REPORTED_KEYS = 10_000

        private

        # seconds (> 0) of a fail_safe:, fail_safe_throttle: or stale_while_revalidate: option
        # (name), nil for nil or false.
        def checked_window(value, name = :fail_safe)
          return nil if value.nil? || value == false

          seconds = value.to_f if value.is_a?(Numeric) || value.is_a?(ActiveSupport::Duration)
          return seconds if seconds && seconds > 0 && seconds.finite?

          raise ArgumentError, "#{name} must be a number of seconds > 0 (or nil), got #{value.inspect}"
        end

        # Checks the windows options give (fail_safe:, fail_safe_throttle:,
        # stale_while_revalidate:).
        def check_fail_safe_options(options)
          checked_window(options[:fail_safe])
          checked_window(options[:fail_safe_throttle], :fail_safe_throttle)
          checked_window(options[:stale_while_revalidate], :stale_while_revalidate)
        end

        # Seconds an entry written with options stays in the tiers past its expiry, as a last
        # good value (fail_safe:) or one answered while revalidated (stale_while_revalidate:);
        # nil when neither is given.
        def kept_past_expiry(options)
          fail_safe = options[:fail_safe]
          revalidate = options[:stale_while_revalidate]
          return nil unless fail_safe || revalidate

          [checked_window(fail_safe), checked_window(revalidate, :stale_while_revalidate)].compact.max
        end

        # Whether entry, expired, is one a fetch with fail_safe: window may fall back on: it
        # expired at most window seconds ago.
        def last_good?(entry, window)
          window && Time.now.to_f - entry.expires_at <= checked_window(window)
        end

        # fetch_multi's value for key, which holds last_good (#last_good?): [value, whether the
        # block computed it (and it is to be written)]. The block's, unless it raises or is
        # throttled (as #fetch's).
        def computed_or_last_good(key, last_good, options)
          around = @engine.computing&.outer # fetch_multi's own computation writes the other names
          throttled = throttled_value(key, last_good, around)
          return [throttled, false] unless Codec::MISS.equal?(throttled)

          begin
            value = yield
          rescue => error
            return [fell_back(key, last_good, error, options, around), false]
          end
          recovered(key)
          [value, true]
        end

        # The last good value a fetch of key answers instead of running its block: after a
        # failure of that block less than fail_safe_throttle ago on this host, else Codec::MISS.
        # A stale hit. computation: the one that uses the value (#fell_back), or nil.
        def throttled_value(key, last_good, computation)
          return Codec::MISS unless @engine.stack.marked?(throttle_key(key))

          computation&.spoil!
          @counters.add(Strata::Counters::STALE_HITS)
          last_good.value
        end

        # The block of a fetch of key raised error: the value of last_good instead, a stale hit;
        # the block is not run again for key for fail_safe_throttle seconds here; error is
        # reported to ActiveSupport.error_reporter once per key and error class. computation,
        # which uses the value, is not cached, nor is any around it (Computation#spoil!): they
        # carry neither the fallback's stamps nor its expiry.
        def fell_back(key, last_good, error, options, computation)
          computation&.spoil!
          throttle = checked_window(options.fetch(:fail_safe_throttle, DEFAULT_THROTTLE), :fail_safe_throttle)
          @engine.stack.mark(throttle_key(key), throttle) if throttle
          @counters.add(Strata::Counters::STALE_HITS)
          report_fail_safe(key, error)
          last_good.value
        end

        # #fell_back for a fragment (Tags#fragment): the last good fragment, as Action View's
        # read of it gives it (html_safe).
        def fallen_back(key, last_good, error, options, computation)
          value = fell_back(key, last_good, error, options, computation)
          value.respond_to?(:html_safe) ? value.html_safe : value
        end

        # The block of a fetch of key with a last good value ran through: its failures are
        # reported again next time.
        def recovered(key)
          @fail_safe_reports.delete(key) unless @fail_safe_reports.empty?
        end

        def report_fail_safe(key, error)
          @fail_safe_reports.clear if @fail_safe_reports.size >= REPORTED_KEYS
          classes = @fail_safe_reports.compute_if_absent(key) { Concurrent::Map.new }
          return unless classes.put_if_absent(error.class, true).nil?

          ActiveSupport.error_reporter&.report(error, handled: true, severity: :warning, source: Failures::SOURCE,
            context: {key: key, fail_safe: true})
        end

        def throttle_key(key)
          own_key(THROTTLE_PREFIX, key)
        end

        # A key of the stack's own (prefix starts with a NUL byte) for key: prefix and key's
        # SHA-256 in hex, which every tier takes whatever key's length.
        def own_key(prefix, key)
          prefix + ::Digest::SHA256.hexdigest(key)
        end
      end
    end
  end
end
