# frozen_string_literal: true

require "active_support/cache"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # stale_while_revalidate: (docs/coherence.md, "Stale while revalidate"): within that many
      # seconds after an entry expired, one fetch recomputes it while every other fetch of the
      # key answers the stale value at once. The one is whoever takes the key's claim (a
      # reserved key added in L1 and memcached: one per host with L1, one across hosts with
      # memcached; Strata::Stack#claim); its write replaces the stale entry only if the tiers
      # still hold it (Strata::Stack#replace), so a write or delete made meanwhile wins.
      module StaleWhileRevalidate
        CLAIM_PREFIX = "\x00strata:revalidate:"

        private

        # For a fetch of key through through that found entry expired, of its version: with
        # stale_while_revalidate: in options and entry expired at most that long ago, :stale
        # when another caller revalidates it (answer it), :revalidate when this one took the
        # claim (compute; the write replaces entry's bytes, through.found); nil otherwise.
        def revalidation(entry, key, options, through)
          window = options[:stale_while_revalidate]
          return nil unless window && through&.found && Time.now.to_f - entry.expires_at <= checked_window(window, :stale_while_revalidate)

          claimed(key, through, through.found)
        end

        # Takes key's claim for through, whose read found stale (the bytes a tier holds): when
        # another caller holds it, :stale (answer found's value; a stale hit, counted); else
        # :revalidate (compute; the write replaces stale).
        def claimed(key, through, stale)
          unless @engine.stack.claim(claim_key(key), claim_ttl)
            through.serve_stale = true
            @counters.add(Strata::Counters::STALE_HITS)
            return :stale
          end
          through.replacing = stale
          :revalidate
        end

        # For a fetch of key through through that read entry soft-stale (Tags#invalidate_tags
        # with soft: true): entry when another caller recomputes it (answer it) or when fail_safe:
        # may fall back on it; nil otherwise, this caller having taken the claim (compute; the
        # write replaces the stale entry). A copy served from the local cache, unread by the
        # read-through, is answered as it is.
        def soft_revalidation(entry, key, options, through, event)
          found = through.found
          return entry unless found && Strata::Entry.soft_stale?(found)

          if claimed(key, through, Strata::Entry.unmarked(found)) == :stale
            event[:stale] = true if event
            return entry
          end
          options[:fail_safe] ? entry : nil
        end

        # A rendering fragment's read (computation, Tags#fragment) of its own entry, expired:
        # within stale_while_revalidate: (window), nil (a miss: render it again) for the render
        # that takes the claim, else the entry as live (answered stale); with fail_safe:, kept on
        # the computation for the render to fall back on (Tags#fragment), and answered while the
        # key's fail_safe_throttle runs; else what a read makes of an expired entry.
        def expired_fragment(computation, key, entry, event, fail_safe, window)
          kept = fail_safe && last_good?(entry, fail_safe)
          computation.last_good = entry if kept
          if window && Time.now.to_f - entry.expires_at <= checked_window(window, :stale_while_revalidate)
            return renders_again?(computation, key) ? nil : answered_stale(entry, event)
          end
          return answered_stale(entry, event, computation) if kept && @engine.stack.marked?(throttle_key(key))

          kept ? nil : entry
        end

        # Whether the rendering fragment (computation) under key holds its claim to render it
        # again, taken now or before (Computation#revalidating; given back when it ends).
        def renders_again?(computation, key)
          return true if computation.revalidating

          computation.revalidating = @stack.claim(claim_key(key), claim_ttl)
        end

        # A copy of the expired entry that a read takes as live, a stale hit (stale: true in
        # event). computation, given for a fallback, is not cached (FailSafe#fell_back).
        def answered_stale(entry, event, computation = nil)
          computation&.spoil!
          @counters.add(Strata::Counters::STALE_HITS)
          event[:stale] = true if event
          live = entry.dup
          live.expires_at = nil
          live
        end

        # read_multi's and fetch_multi's value of the soft-stale entry bytes under key (Codec
        # #live_value's arguments): in fetch_multi, Codec::MISS when this caller takes the key's
        # claim (it computes; its write replaces the stale entry), the read-through joining
        # fetch_multi's claims (Strata::Computation#claims); else the stale value, a stale hit.
        #
        # With revalidate: true (read_multi's option), Codec::MISS: the caller fetches the key,
        # which answers it or recomputes it (Strata::Representation's collections).
        def soft_stale_value(key, bytes, raw, version, none_pending, revalidate = false)
          return Codec::MISS if revalidate

          value = @codec.live_value(Strata::Entry.unmarked(bytes), raw, version, none_pending)
          return value if Codec::MISS.equal?(value)

          claims = @engine.current&.claims
          if claims.is_a?(Hash)
            through = claims[key] ||= @engine.stack.read_through(key)
            found = through.get
            return value unless found && Strata::Entry.soft_stale?(found)

            return (claimed(key, through, Strata::Entry.unmarked(found)) == :stale) ? value : Codec::MISS
          end
          @counters.add(Strata::Counters::STALE_HITS)
          value
        end

        # fetch_multi's answer for key, whose read found entry expired, with
        # stale_while_revalidate: in options: the stale value when another caller revalidates
        # it, else Codec::MISS (compute it; when this caller took the claim, its write replaces
        # the stale entry). The entry's read-through joins fetch_multi's claims
        # (Strata::Computation#claims).
        def multi_revalidation(key, entry, options)
          claims = @engine.current&.claims
          return Codec::MISS unless claims.is_a?(Hash)

          through = claims[key] ||= @engine.stack.read_through(key)
          through.get
          (revalidation(entry, key, options, through) == :stale) ? entry.value : Codec::MISS
        end

        # Runs the block (fetch_multi), then gives back the claims its revalidations took
        # among claims (key => Strata::ReadThrough, or nil).
        def revalidating(claims)
          yield
        ensure
          claims&.each { |key, through| revalidated(key) if through.replacing && !through.replaced }
        end

        # The claim a revalidating fetch of key took is given back: it wrote nothing (its block
        # raised, or a change won). A claim whose value was written stays until it lapses
        # (claim_ttl): another host whose L1 still holds the stale copy, until its poller
        # drops it, answers that copy rather than recomputing it again.
        def revalidated(key)
          @engine.stack.release(claim_key(key))
        end

        # How long a claim holds: fill_wait, as long as a fetch waits for another's fill (1 s
        # when single-flight is off). A revalidation that takes longer lets another begin.
        def claim_ttl
          wait = @engine.stack.fill_wait
          (wait > 0) ? wait : 1
        end

        def claim_key(key)
          own_key(CLAIM_PREFIX, key)
        end
      end
    end
  end
end
