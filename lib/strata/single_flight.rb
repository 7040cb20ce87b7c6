# frozen_string_literal: true

require "digest"
require "strata/clock"
require "strata/errors"
require "strata/fill"

module Strata
  # The read-through half of Strata::Stack (DESIGN section 4, steps 1-5): one fill per key on a
  # host, and one per key across hosts.
  #
  # - Host single-flight: after a miss in the host tier (capability :host, the shared-memory
  #   table), the caller takes a lock entry in that tier with add. Other processes and threads of
  #   the host poll the host tier for the value instead of going further; when the holder is done
  #   (or fill_wait passes) the next one takes the lock or computes itself. Never a deadlock.
  # - Cluster lease: a tier with capability :leases (memcached) is read with lease_get. A fresh
  #   value is a hit. A won lease makes this caller the filler. A lost lease serves the stale
  #   value if there is one, else waits (polling) for the winner's value; after fill_wait the
  #   caller computes for itself and writes nothing.
  # - Fill: the computed value is added to the other tiers, top-down, then written to the leased
  #   tier with its lease's cas, the commit point. A tier with tombstones (SQL) takes it only
  #   where the key was not deleted since the read (Tier#add_for_fill). A fill refused anywhere
  #   (a value written since its read, or the key deleted, invalidated or rewritten meanwhile)
  #   drops the copies just written, so no tier keeps a value built from old data over a newer
  #   one, nor over a delete.
  #
  # Included in Stack; uses its @tiers, @names, #failed and #safely.
  module SingleFlight
    # Lock entries live in the host tier beside the data; no cache key starts with a NUL byte.
    LOCK_PREFIX = "\x00strata:fill:".b.freeze
    LOCK_VALUE = "1"
    # Keys too long to prefix are locked by digest; a collision only makes two keys wait on
    # each other.
    MAX_PLAIN_LOCKED_KEY = 250 - LOCK_PREFIX.bytesize
    # Seconds between polls while another caller fills: the first, and the longest.
    POLL_INTERVAL = 0.001
    MAX_POLL_INTERVAL = 0.016

    # A Fill for one read-through of key: pass it to #get and #set, then to #finish.
    # host_probed: the caller has just read key with #get_host, which found nothing live; the
    # read-through then skips its own first read of the host tier (see #read_tiers).
    def fill_for(key, host_probed = false)
      Fill.new(self, key, host_probed && @host_index == 0)
    end

    # Ends a read-through: gives back the host lock and an unused lease. Always call it (ensure).
    def finish(fill)
      if fill.lease_pending?
        # The caller computed nothing to store (an error, or nil with skip_nil): free the key
        # for the next reader rather than make everyone wait for the lease to lapse.
        safely(fill.lease_index) { @tiers[fill.lease_index].delete(fill.key) }
        fill.lease_done = true
      end
      return unless fill.host_lock

      safely(@host_index) { @tiers[@host_index].delete(fill.host_lock) }
      fill.host_lock = nil
    end

    # The bytes under key in the top tier when it is the host tier (a miss there costs next to
    # nothing to repeat), else nil without reading. For a probe before a read-through.
    def get_host(key)
      return nil unless @host_index == 0

      bytes = @tiers[0].get(key)
      (bytes && Entry.stamped?(bytes)) ? current(key, bytes, 0) : bytes
    end

    # Whether key is one of the stack's own lock entries, not a cache entry.
    def lock_key?(key)
      key.start_with?(LOCK_PREFIX)
    end

    private

    # The first read-through with a fill reads the tiers; a second one with the same fill (the
    # adapter's instrumented path after its unobserved probe) gets the same answer, unread.
    def read_through(key, info, fill)
      return fill.found if fill.read

      fill.found = read_tiers(key, info, fill)
      fill.read = true
      fill.found
    end

    def read_tiers(key, info, fill)
      index = 0
      # Visits each tier at most once.
      while index < @tiers.size
        bytes = if @lease_tiers[index]
          lease_read(key, index, fill, info)
        elsif index == @host_index && fill.host_read
          nil # read just now by #get_host; host_single_flight reads it again under the lock
        elsif @tombstone_tiers[index]
          fenced_read(key, index, fill, info)
        else
          safely(index, info) { @tiers[index].get(key) }
        end
        bytes = current(key, bytes, index) if bytes && !@lease_tiers[index] && !@tombstone_tiers[index] && Entry.stamped?(bytes)
        return found(key, bytes, index, info, fill) if bytes

        if index == @host_index
          bytes = host_single_flight(key, index, fill, info)
          return found(key, bytes, index, info, fill) if bytes
        end
        index += 1
      end
      nil
    end

    def found(key, bytes, index, info, fill)
      info[:tier] = @names[index] if info
      info[:stale] = true if info && fill.stale
      return bytes if index == 0 || fill.stale

      if fill.lease_pending?
        ttl = remaining_ttl(bytes)
        if ttl == 0
          # Expired by its header, yet kept below for race_condition_ttl's window: the caller
          # writes it back (or deletes it), then its value, as after any read that found a value.
          # Those writes are plain sets, which replace the lease's placeholder (a fill would be
          # refused where the stale copy is still stored). Meanwhile other hosts wait on the
          # lease as for any fill; should the caller write nothing, it lapses after fill_wait.
          fill.lease_done = true
        else
          fill_write(key, bytes, ttl, fill, index)
        end
      else
        backfill(key, bytes, index)
      end
      bytes
    end

    # Takes the host lock, or waits for its holder's value. The value, or nil to go on (holding
    # the lock, or after fill_wait without it). A failed poll is reported and waited through.
    def host_single_flight(key, index, fill, info)
      tier = @tiers[index]
      lock = lock_key(key)
      deadline = Clock.monotonic + @fill_wait
      interval = POLL_INTERVAL
      # Bound: fill_wait seconds of polls.
      loop do
        taken = safely(index, info, :failed) { tier.add(lock, LOCK_VALUE, ttl: @fill_wait) }
        return nil if taken == :failed # the host tier is failing: don't wait on it
        if taken
          fill.host_lock = lock
          # The previous holder may have filled and let go between our miss and our add.
          return checked(key, safely(index, info) { tier.get(key) }, index)
        end
        return nil if Clock.monotonic > deadline

        interval = pause(interval)
        bytes = checked(key, safely(index, info) { tier.get(key) }, index)
        return bytes if bytes
      end
    end

    # Reads a leased tier. The value to serve, or nil to go on (as the lease's winner, or to
    # compute unleased after fill_wait). A failed first read skips the tier; a failed poll is
    # reported and waited through.
    def lease_read(key, index, fill, info)
      tier = @tiers[index]
      lease = safely(index, info) { tier.lease_get(key, lease_ttl: @fill_wait) }
      return nil unless lease

      deadline = Clock.monotonic + @fill_wait
      interval = POLL_INTERVAL
      # Bound: fill_wait seconds of polls.
      loop do
        if lease&.won?
          fill.lease_index = index
          fill.lease_cas = lease.cas
          return nil
        end
        if lease&.value && Entry.stamped?(lease.value) && !checked(key, lease.value, index)
          # Out of date by its stamps, and now deleted: lease again, at once, to fill it.
          lease = safely(index, info) { tier.lease_get(key, lease_ttl: @fill_wait) }
          next unless lease&.value && Entry.stamped?(lease.value) && !checked(key, lease.value, index)

          return nil # out of date again at once: go on below without the lease
        end
        if lease&.value
          fill.stale = lease.stale?
          return lease.value
        end
        if Clock.monotonic > deadline
          fill.unleased = true
          return nil
        end
        interval = pause(interval)
        lease = safely(index, info) { tier.lease_get(key, lease_ttl: @fill_wait) }
      end
    end

    # Reads a tier with tombstones; where it has no value, notes what the fill is to be stored
    # over there (see #fill_write).
    def fenced_read(key, index, fill, info)
      bytes, tombstone = safely(index, info) { @tiers[index].get_for_fill(key) }
      if bytes && Entry.stamped?(bytes) && !current(key, bytes, index)
        # Out of date by its stamps, and now deleted: read the delete's tombstone to fill over.
        bytes, tombstone = safely(index, info) { @tiers[index].get_for_fill(key) }
        bytes = checked(key, bytes, index)
      end
      fill.read_tombstone(index, tombstone) unless bytes
      bytes
    end

    # bytes (nil included) unless they are a stamped entry that is out of date (see #current).
    def checked(key, bytes, index)
      (bytes && Entry.stamped?(bytes)) ? current(key, bytes, index) : bytes
    end

    # Sleeps interval; the next one, doubled up to MAX_POLL_INTERVAL, so long waits poll gently.
    def pause(interval)
      sleep interval
      [interval * 2, MAX_POLL_INTERVAL].min
    end

    # Writes a fill into the tiers above bottom (all of them for a computed value): every tier
    # but the leased one top-down, then the leased one with the lease's cas, the commit point.
    # The others are written with add: the read-through found no live value in them, so one
    # there now was written since (by a write or another fill) and is newer than this fill,
    # which gives way to it. A tier with tombstones also refuses it when the key was deleted
    # since the read. On a refusal, add's or the lease's, the copies just written are taken back
    # (#take_back; a lease still pending is given back by #finish). True when the fill was kept.
    #
    # Top-down, so that without a lease the bottom tier's fenced add is the commit point: a
    # delete clears the bottom first and the tiers above after, so a fill that got into the
    # bottom before the delete had already written above it, and the delete clears that too.
    def fill_write(key, bytes, ttl, fill, bottom = @tiers.size)
      return false if fill.unleased

      written = []
      0.upto(bottom - 1) do |index|
        next if index == fill.lease_index

        added = safely(index, nil, :failed) do
          @tiers[index].add_for_fill(key, bytes, fill.tombstone(index), ttl: ttl)
        rescue ValueTooLargeError => error
          failed(error, index)
          drop(key, index)
          :failed
        end
        next if added == :failed
        next written << index if added

        take_back(key, bytes, written)
        return false
      end
      return true unless fill.lease_pending?

      fill.lease_done = true
      # A leased tier that fails is skipped like any other; only its refusal undoes the fill.
      kept = safely(fill.lease_index, nil, true) do
        @tiers[fill.lease_index].lease_fill(key, bytes, fill.lease_cas, ttl: ttl)
      rescue ValueTooLargeError
        drop(key, fill.lease_index)
        true # the other tiers hold it; the leased tier simply doesn't
      end
      return true if kept

      take_back(key, bytes, written)
      false
    end

    # Removes the copies of bytes a refused fill wrote into the tiers at indexes written. A tier
    # with tombstones gives its copy back only while it still holds it: a caller that stored a
    # value there since (the next lease's winner, say) keeps it.
    def take_back(key, bytes, written)
      written.each { |index| safely(index) { @tiers[index].retract_fill(key, bytes) } }
    end

    def lock_key(key)
      return LOCK_PREFIX + key.b if key.bytesize <= MAX_PLAIN_LOCKED_KEY

      LOCK_PREFIX + Digest::SHA256.hexdigest(key)
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
