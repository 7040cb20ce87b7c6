# frozen_string_literal: true

require "strata/entry"
require "strata/errors"

module Strata
  # What the tiers above hold of the tiers below, for the Stack and SingleFlight alike: a copy
  # of what a read found below goes up with its remaining TTL (#backfill), capped in the host
  # tier (#ttl_at); after a write or a copy the lowest tier it reached is read back, and when it
  # now holds something else the copies above go (#settle, #settle_multi); a stamped entry read
  # anywhere is served only while its stamps are current (#current). Failures go to the
  # TierList, which reports them; nothing here raises a TierError.
  #
  # Frozen after new; shared by every thread of the process.
  class Copies
    NONE = {}.freeze

    # list: the stack's Strata::TierList. dependencies: its Strata::Dependencies (the stamp
    # check). host_ttl: seconds (> 0) the host tier keeps an entry at most, or nil (Stack.new).
    def initialize(list, dependencies, host_ttl: nil)
      @list = list
      @tiers = list.tiers
      @dependencies = dependencies
      @host_index = list.index_of(:host)
      # The index of the tier whose TTLs are capped (#ttl_at), or nil.
      @capped = host_ttl && @host_index
      @host_ttl = host_ttl&.to_f
      @announce_at = announcing_tier
      freeze
    end

    # Whether a tier's log tells other hosts of changes below a tier they also read: a fill
    # under a lease is then settled against it (#settle_fill).
    def announcing?
      !@announce_at.nil?
    end

    # Stamped entry bytes read at tier index: bytes when every stamp is current; a soft-stale
    # copy of them (Entry.soft_stale) when a soft invalidation left them stale and its window
    # is open, the tier's copy kept; else nil, and the tier's copy is deleted: it can never be
    # current again, and a fill can then take its place. Malformed bytes are left to the
    # reader, which reports them.
    def current(key, bytes, index)
      return bytes if @dependencies.current?(bytes)
      return Entry.soft_stale(bytes) if @dependencies.soft_stale?(bytes)

      @list.drop(key, index)
      nil
    rescue CorruptError
      bytes
    end

    # After a bottom-up write of bytes that tier lowest took: when that tier now holds something
    # else, a later writer got there after us, and our copies above it may be older than its
    # value. They are dropped, and refill from below. Whichever writer stored last at the bottom,
    # the copies above end up its value or absent: its own writes above come after every earlier
    # writer's, and a slower writer's copies above are dropped by that writer's own check.
    # Whether the copies stayed.
    #
    # When lowest is the tier whose log tells other hosts of changes and a shared tier above
    # it (memcached) held a dropped copy, another host may have taken that copy into its L1
    # after its poller applied the change it is older than: a key row goes to the log, and
    # every poller drops it again (the ordering rule, docs/coherence.md).
    #
    # token: what the write to lowest answered, when it gave a token (Tier write_tokens): the
    # tier is then asked whether it still holds that write, and the value is not read back.
    def settle(key, bytes, lowest, token = nil)
      # Not the app's read: uncounted.
      held = @list.safely(lowest) { token.is_a?(Integer) ? @tiers[lowest].holds?(key, token) : @tiers[lowest].peek(key) == bytes }
      return true if held

      take_back_copies(key, lowest)
      announce([key]) if lowest == @announce_at
      false
    end

    # After a fill under a lease committed bytes (Strata::SingleFlight): #settle against the
    # tier with the log, whose value the fill copied up or added to. A fill that read that tier
    # before a change and committed after its row was applied would otherwise leave its value
    # in memcached for good. Whether the fill stayed.
    def settle_fill(key, bytes)
      settle(key, bytes, @announce_at)
    end

    # #settle for many keys (lowest: key => the tier index whose bytes, entries[key], were
    # written or copied above it; tokens: key => the token that write answered, if any): read
    # back from those tiers, one peek_multi per tier (one write_tokens for the keys with tokens);
    # where it now holds something else (or can't say), the copies above are dropped.
    def settle_multi(entries, lowest, tokens = NONE)
      lowest.reject { |_key, index| index.zero? }.group_by { |_key, index| index }.each do |index, pairs|
        with_tokens, keys = pairs.map(&:first).partition { |key| tokens.key?(key) }
        changed = []
        unless keys.empty?
          current = read_back(index) { |tier| tier.peek_multi(keys) }
          changed.concat(keys.reject { |key| current[key] == entries[key] })
        end
        unless with_tokens.empty?
          current = read_back(index) { |tier| tier.write_tokens(with_tokens) }
          changed.concat(with_tokens.reject { |key| current[key] == tokens[key] })
        end
        changed.each { |key| take_back_copies(key, index) }
        announce(changed) if index == @announce_at && !changed.empty?
      end
    end

    # Drops key from every tier above index.
    def take_back_copies(key, index)
      (index - 1).downto(0) { |above| @list.drop(key, above) }
    end

    # Copy bytes found at tier index into the tiers above it, keeping the remaining time to live,
    # then settle them as a write does: a write or delete that reached tier index after our read
    # may have reached the tiers above before our copies did (writes and deletes go bottom-up),
    # and our copies would then hide it for their whole TTL. When tier index no longer holds bytes
    # (or can't say), the copies are dropped, and the next read refills from below.
    #
    # host_lock: what Tier#lock_fill answered for key in the host tier before the read below. A
    # token: the host tier's copy is an add fenced by it (add_for_fill), which a change since
    # the lock was taken refuses; unfenced, another process of the host could read a copy that
    # change overtook until the settle, and for its TTL if this process died first. false
    # (another caller holds the lock): no copy there. nil: a plain set.
    def backfill(key, bytes, index, host_lock = nil)
      settle(key, bytes, index) if copy_up(key, bytes, index, host_lock)
    end

    # Copies bytes found at tier index into the tiers above it, keeping the remaining time to
    # live (host_lock: as #backfill's). Counters are not copied: only their own tier may change
    # them. Whether it copied into some tier (tried to).
    def copy_up(key, bytes, index, host_lock = nil)
      return false unless Entry.entry?(bytes)

      expires_at = Entry.expires_at(bytes)
      ttl = nil
      if expires_at != 0
        ttl = (expires_at - Entry.now) / 1000.0
        return false if ttl <= 0
      end
      return false if host_lock == false && index == 1 # the host tier alone is above, and skipped
      index.times do |above|
        if host_lock.nil? || above != @host_index
          @tiers[above].set(key, bytes, ttl: ttl_at(above, ttl))
        elsif host_lock
          @tiers[above].add_for_fill(key, bytes, host_lock, ttl: ttl_at(above, ttl))
        end
      rescue ValueTooLargeError
        next
      rescue TierError => error
        @list.failed(error, above)
      end
      true
    rescue CorruptError
      false # the reader decodes these bytes too and reports them
    end

    # The TTL an entry written with ttl (seconds; nil or 0: none) gets in tier index: ttl, but
    # at most host_ttl in the host tier when new was given one.
    def ttl_at(index, ttl)
      return ttl unless index == @capped

      (ttl.nil? || ttl == 0 || ttl > @host_ttl) ? @host_ttl : ttl
    end

    private

    # What the block read back from the tier at index (settle_multi): a Hash, the part of it
    # answered when the tier failed (PartialError), reported.
    def read_back(index)
      yield @tiers[index]
    rescue TierError => error
      @list.answered(error, index)
    end

    # Appends a key row for each of keys to the log of the tier at @announce_at (see #settle).
    def announce(keys)
      @list.safely(@announce_at) { @tiers[@announce_at].log_keys(keys) }
    end

    # The index of the tier whose invalidation log tells other hosts of changes (the SQL tier
    # with invalidation_log) when a tier other hosts also read (not the host tier) sits above
    # it; else nil.
    def announcing_tier
      index = @tiers.index { |tier| tier.capabilities[:invalidation_log] }
      index if index && (0...index).any? { |above| !@tiers[above].capabilities[:host] }
    end
  end
end
