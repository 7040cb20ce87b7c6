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

          unless @engine.stack.claim(claim_key(key), claim_ttl)
            through.serve_stale = true
            @counters.add(Strata::Counters::STALE_HITS)
            return :stale
          end
          through.replacing = through.found
          :revalidate
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
          claims&.each { |key, through| revalidated(key) if through.replacing }
        end

        # The claim a revalidating fetch of key took is given back.
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
