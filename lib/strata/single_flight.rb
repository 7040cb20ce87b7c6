# frozen_string_literal: true

require "strata/clock"
require "strata/counters"
require "strata/entry"
require "strata/errors"
require "strata/read_through"

module Strata
  # The read-through protocol of a Strata::Stack (docs/architecture.md, "The way a fetch goes", steps 3-7): one fill per key
  # on a host, and one per key across hosts.
  #
  # - Host single-flight: after a miss in the host tier (capability :host, the shared-memory
  #   table), the caller takes the key's fill lock there (Tier#lock_fill). Other processes and
  #   threads of the host poll the host tier for the value instead of going further; when the
  #   holder is done (or fill_wait passes) the next one takes the lock or computes itself. Never
  #   a deadlock. A key whose lock can't be had (its place is another key's) is filled unlocked.
  # - Cluster lease: a tier with capability :leases (memcached) is read with lease_get. A fresh
  #   value is a hit. A won lease makes this caller the filler. A lost lease serves the stale
  #   value if there is one, else waits (polling) for the winner's value; after fill_wait the
  #   caller computes for itself and writes nothing.
  # - Fill: the computed value is written bottom-up: added to the tier with tombstones (SQL),
  #   which takes it only where the key was not deleted since the read (Tier#add_for_fill),
  #   written to the leased tier with its lease's cas, then added to the host tier under the
  #   fill's lock, which a change of the key marks. A fill refused below (a value written since
  #   its read, or the key deleted, invalidated or rewritten meanwhile) drops the copies just
  #   written, so no tier keeps a value built from old data over a newer one, nor over a
  #   delete, and no host serves it first.
  #
  # One per Stack (made when fill_wait > 0), used through the read-throughs it makes
  # (Stack#read_through): each read-through's own state is its Strata::ReadThrough. No state changes
  # after new: threads share it.
  class SingleFlight
    # Seconds between polls while another caller fills: the first, and the longest.
    POLL_INTERVAL = 0.001
    MAX_POLL_INTERVAL = 0.016

    # list: the stack's Strata::TierList (its tiers, top first, and where their failures are
    # reported, noted in a call's info). fill_wait: seconds (> 0) a caller waits for
    # another caller's fill. copies: the stack's Strata::Copies (the stamp check of an entry
    # read, the copy of what was found below into the tiers above, the host tier's TTL cap, the
    # settle of a fill under a lease against the tier with the log).
    # counters: a Strata::Counters for the waits on a host lock or lease and the stale hits
    # served, or nil.
    def initialize(list, fill_wait, copies, counters: nil)
      @list = list
      @tiers = list.tiers
      @names = list.names
      @fill_wait = fill_wait
      @copies = copies
      @counters = counters
      @host_index = list.index_of(:host)
      @lease_tiers = list.capable(:leases)
      @tombstone_tiers = list.capable(:tombstones)
    end

    # The read-through's read of through.key (ReadThrough#get's first): the bytes found, or nil
    # when this caller is to compute the value. info as ReadThrough#get's.
    def read(through, info)
      key = through.key
      index = 0
      # Visits each tier at most once.
      while index < @tiers.size
        bytes = if @lease_tiers[index]
          lease_read(key, index, through, info)
        elsif index == @host_index && through.host_read
          nil # read just now by Stack#get_host; host_single_flight reads it again under the lock
        elsif @tombstone_tiers[index]
          fenced_read(key, index, through, info)
        else
          @list.safely(index, info) { @tiers[index].get(key) }
        end
        bytes = @copies.current(key, bytes, index) if bytes && !@lease_tiers[index] && !@tombstone_tiers[index] && Entry.stamped?(bytes)
        return found(key, bytes, index, info, through) if bytes

        if index == @host_index
          bytes = host_single_flight(key, index, through, info)
          return found(key, bytes, index, info, through) if bytes
        end
        index += 1
      end
      nil
    end

    # Writes a fill into every tier (ReadThrough#set of a computed value): see #fill_write. True when
    # the fill was kept.
    def write(through, bytes, ttl)
      fill_write(through.key, bytes, ttl, through)
    end

    # Ends a read-through: gives back the host lock and an unused lease.
    def finish(through)
      if through.lease_pending?
        # The caller computed nothing to store (an error, or nil with skip_nil): free the key
        # for the next reader rather than make everyone wait for the lease to lapse.
        @list.drop(through.key, through.lease_index)
        through.lease_done = true
      end
      return unless (token = through.host_lock)

      through.host_lock = nil
      # A lock that can't be given back lapses after fill_wait.
      @list.safely(@host_index) { @tiers[@host_index].unlock_fill(through.key, token) }
    end

    private

    def found(key, bytes, index, info, through)
      info[:tier] = @names[index] if info
      if through.stale
        @counters&.add(Counters::STALE_HITS)
        info[:stale] = true if info
      end
      # A soft-stale copy goes to no tier; a lease won below it is given back by #finish.
      return bytes if index == 0 || through.stale || Entry.soft_stale?(bytes)

      if through.lease_pending?
        ttl = remaining_ttl(bytes)
        if ttl == 0
          # Expired by its header, yet kept below for race_condition_ttl's window: the caller
          # writes it back (or deletes it), then its value, as after any read that found a value.
          # Those writes are plain sets, which replace the lease's placeholder (a fill would be
          # refused where the stale copy is still stored). Meanwhile other hosts wait on the
          # lease as for any fill; should the caller write nothing, it lapses after fill_wait.
          through.lease_done = true
        else
          fill_write(key, bytes, ttl, through, index)
        end
      else
        # Under the host lock, L1's copy is fenced as a fill's is: a change since refuses it.
        @copies.backfill(key, bytes, index, through.host_lock)
      end
      bytes
    end

    # Takes the host lock, or waits for its holder's value. The value, or nil to go on (holding
    # the lock, or after fill_wait without it). The first try is the common case, and takes no
    # block: a loop and rescuing blocks around it would be paid by every cold fetch.
    def host_single_flight(key, index, through, info)
      token = take_lock(key, index, info)
      return nil if token == :failed # the host tier is failing: don't wait on it
      return locked_read(key, index, through, info, token) unless token == false

      wait_for_fill(key, index, through, info)
    end

    # Tier#lock_fill of key at the host tier (index): its answer, or :failed (reported).
    def take_lock(key, index, info)
      @list.safely(index, info, :failed) { @tiers[index].lock_fill(key, @fill_wait) }
    end

    # The read of key once the host lock is taken (token; nil: there was no lock to be had, and
    # the caller fills unlocked). The previous holder may have filled and let go between our
    # miss and now. This read is counted (Tier#get) when it is the read-through's first of the
    # host tier (after a probe, Tier#probe, which counts no miss); else it reads again a miss
    # counted just now, uncounted (Tier#peek), as the polls do.
    def locked_read(key, index, through, info, token)
      through.host_lock = token
      tier = @tiers[index]
      bytes = @list.safely(index, info) { through.host_read ? tier.get(key) : tier.peek(key) }
      checked(key, bytes, index)
    end

    # Another caller holds the host lock: polls for its value, and for the lock, until fill_wait
    # has passed. The value, or nil to go on (holding the lock, or without it). A failed poll is
    # reported and waited through. The wait is counted (lock_waits) and added to info[:waited].
    def wait_for_fill(key, index, through, info)
      tier = @tiers[index]
      deadline = Clock.monotonic + @fill_wait
      interval = POLL_INTERVAL
      started = Clock.monotonic_us
      # Bound: fill_wait seconds of polls.
      loop do
        interval = pause(interval)
        bytes = checked(key, @list.safely(index, info) { tier.peek(key) }, index)
        return bytes if bytes

        token = take_lock(key, index, info)
        return nil if token == :failed
        return locked_read(key, index, through, info, token) unless token == false
        return nil if Clock.monotonic > deadline
      end
    ensure
      wait_ended(Counters::LOCK_WAITS, started, through, info)
    end

    # Reads a leased tier. The value to serve, or nil to go on (as the lease's winner, or to
    # compute unleased after fill_wait). A failed first read skips the tier; a failed poll is
    # reported and waited through. A wait is counted (lease_waits) and added to info[:waited].
    def lease_read(key, index, through, info)
      tier = @tiers[index]
      lease = @list.safely(index, info) { tier.lease_get(key, lease_ttl: @fill_wait) }
      return nil unless lease

      deadline = Clock.monotonic + @fill_wait
      interval = POLL_INTERVAL
      started = nil
      # Bound: fill_wait seconds of polls.
      loop do
        if lease&.won?
          through.lease_index = index
          through.lease_cas = lease.cas
          return nil
        end
        value = lease&.value
        # A soft-stale one is answered as the copy Copies#current made of it.
        if value && Entry.stamped?(value) && !(value = checked(key, value, index))
          # Out of date by its stamps, and now deleted: lease again, at once, to fill it.
          lease = @list.safely(index, info) { tier.lease_get(key, lease_ttl: @fill_wait) }
          next unless lease&.value && Entry.stamped?(lease.value) && !checked(key, lease.value, index)

          return nil # out of date again at once: go on below without the lease
        end
        if value
          through.stale = lease.stale?
          return value
        end
        if Clock.monotonic > deadline
          through.unleased = true
          return nil
        end
        started ||= Clock.monotonic_us
        interval = pause(interval)
        lease = @list.safely(index, info) { tier.lease_get(key, lease_ttl: @fill_wait) }
      end
    ensure
      wait_ended(Counters::LEASE_WAITS, started, through, info) if started
    end

    # A wait that began at started (Clock.monotonic_us) is over: counted at index (LOCK_WAITS or
    # LEASE_WAITS), and its seconds added to through.waited and info[:waited].
    def wait_ended(index, started, through, info)
      seconds = @counters ? @counters.waited(index, started) : (Clock.monotonic_us - started) / 1_000_000.0
      through.waited = (through.waited || 0) + seconds
      info[:waited] = (info[:waited] || 0) + seconds if info
    end

    # Reads a tier with tombstones; where it has no value, notes what the fill is to be stored
    # over there (see #fill_write).
    def fenced_read(key, index, through, info)
      bytes, tombstone = @list.safely(index, info) { @tiers[index].get_for_fill(key) }
      # A soft-stale one is answered as the copy Copies#current made of it.
      if bytes && Entry.stamped?(bytes) && !(bytes = @copies.current(key, bytes, index))
        # Out of date by its stamps, and now deleted: read the delete's tombstone to fill over.
        bytes, tombstone = @list.safely(index, info) { @tiers[index].get_for_fill(key) }
        bytes = checked(key, bytes, index)
      end
      through.read_tombstone(index, tombstone) unless bytes
      bytes
    end

    # bytes (nil included) unless they are a stamped entry that is out of date (see current).
    def checked(key, bytes, index)
      (bytes && Entry.stamped?(bytes)) ? @copies.current(key, bytes, index) : bytes
    end

    # Sleeps interval; the next one, doubled up to MAX_POLL_INTERVAL, so long waits poll gently.
    def pause(interval)
      sleep interval
      [interval * 2, MAX_POLL_INTERVAL].min
    end

    # Writes a fill into the tiers above bottom (all of them for a computed value), bottom-up:
    # the tier with tombstones (SQL) first, with add fenced by the token of the fill's read, then
    # the leased tier with the lease's cas, then the host tier (L1), fenced by the fill's lock.
    # The others are written with add: the read-through found no live value in them, so one
    # there now was written since (by a write or another fill) and is newer than this fill,
    # which gives way to it. A failure in a tier with tombstones counts as a refusal. On a
    # refusal below the host tier, the copies just written are taken back (#take_back; a lease
    # still pending is given back by #finish). A committed lease is then checked against the
    # tier with the log (settled). True when the fill was kept.
    #
    # Bottom-up, so that no host serves the fill before the tiers every host refills from took
    # it: a fill that read before a change is refused below (a tombstone or a newer value, the
    # lease's cas) before any copy of it is served. A change that lands between the fill's
    # commit below and its L1 add marks the fill's lock: on this host the change's own L1 write
    # does; from another host the poller's delete of the key when it applies the change's row
    # (Poller#drop_changed). The L1 add is then refused, and the copies below are left to the
    # change, which replaced or removed them after this fill's. A refusal by L1 alone (a mark
    # from a change that came before this fill read) costs L1's copy only: the next read copies
    # it up from below.
    def fill_write(key, bytes, ttl, through, bottom = @tiers.size)
      return false if through.unleased

      written = []
      committed = bottom < @tiers.size # the value is below already: this copies it up
      index = bottom
      # A while loop with one rescue, not downto and safely's blocks: this runs in every cold fetch.
      while (index -= 1) >= 0
        if index == through.lease_index
          next unless through.lease_pending?
          return false unless lease_write(key, bytes, ttl, through, bottom, written)

          committed = true
          next
        end
        host = index == @host_index
        # Without its lock (the word was another key's) nothing would refuse a copy of a value
        # changed since its commit below: the next read copies it up from there (Copies#backfill).
        return true if host && through.host_lock.nil? && (committed || !written.empty?)

        begin
          # The host tier's fence is the fill lock (a write or delete of the key marks it).
          added = @tiers[index].add_for_fill(key, bytes, host ? through.host_lock : through.tombstone(index), ttl: @copies.ttl_at(index, ttl))
        rescue TierError, ValueTooLargeError => error
          @list.failed(error, index, nil)
          @list.drop(key, index) if error.is_a?(ValueTooLargeError)
          # A tier with tombstones that failed could not say whether a delete came since the
          # read: its fence is not there, and the copies above it would outlive such a delete.
          next unless @tombstone_tiers[index] && error.is_a?(TierError)

          take_back(key, bytes, written)
          return false
        end
        next written << index if added
        # Refused by L1 after the tiers below took it: see above.
        return true if host && (committed || !written.empty?)

        take_back(key, bytes, written)
        return false
      end
      true
    end

    # The leased tier's part of #fill_write: the lease's cas, then the check against the tier
    # with the log below it. Whether the fill stays (when not, the copies in written went).
    def lease_write(key, bytes, ttl, through, bottom, written)
      through.lease_done = true
      # A leased tier that fails is skipped like any other; only its refusal undoes the fill.
      kept = @list.safely(through.lease_index, nil, true) do
        @tiers[through.lease_index].lease_fill(key, bytes, through.lease_cas, ttl: ttl)
      rescue ValueTooLargeError
        @list.drop(key, through.lease_index)
        true # the other tiers hold it; the leased tier simply doesn't
      end
      unless kept
        take_back(key, bytes, written)
        return false
      end
      return true unless @copies.announcing? && through.lease_index < bottom

      # settle_fill takes the copies back itself when the tier with the log holds something else
      @copies.settle_fill(key, bytes)
    end

    # Removes the copies of bytes a refused fill wrote into the tiers at indexes written. A tier
    # with tombstones gives its copy back only while it still holds it: a caller that stored a
    # value there since (the next lease's winner, say) keeps it.
    def take_back(key, bytes, written)
      written.each { |index| @list.safely(index) { @tiers[index].retract_fill(key, bytes) } }
    end

    # Seconds left before the entry expires: nil for never, 0 when it already has.
    def remaining_ttl(bytes)
      return nil unless Entry.entry?(bytes)

      expires_at = Entry.expires_at(bytes)
      return nil if expires_at == 0

      [(expires_at - Entry.now) / 1000.0, 0].max
    rescue CorruptError
      nil
    end
  end
end
