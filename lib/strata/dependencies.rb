# frozen_string_literal: true

require "digest"
require "securerandom"
require "strata/entry"
require "strata/errors"
require "strata/dependencies/places"

module Strata
  # Tag versions (docs/coherence.md). A tag is a String naming something entries
  # are built from ("bugs/42"). Its version is an opaque 64-bit value, compared for equality
  # only: every bump, and every creation of a missing version, draws a fresh random one. An entry
  # stamps the versions its tags had before its value was computed, and is valid while every
  # stamp equals its tag's current version. A version that is lost (evicted, deleted, a tier
  # emptied) is created anew, and a fresh random value matches no stamp written before: losing
  # versions costs misses, never stale hits.
  #
  # Where versions live: in the stack's own tiers, by tag id in a tier that keeps them apart
  # (capability :versions: the SQL tier's versions table), else under reserved keys that only
  # this class makes (VERSION_PREFIX, a NUL byte first like the host single-flight's locks, so
  # no cache key can name one and Stack#keys lists none; L1's check of stamps, table.h, reads
  # them there). The bottom tier is the authority (the SQL tier when there is one, durable;
  # else memcached; else L1); the tiers above cache it. The host tier's copies live at most
  # coherence_interval seconds when there are tiers below it, so a host that missed another
  # host's bump (it bumped its own L1 only) reads the authority again at most that often; with a
  # poller that keeps them current (polled:), while it vouches for them instead (#copy). The SQL
  # tier's versions table is beyond its expiry; elsewhere an eviction may drop one, which only
  # costs misses (above). Tag ids are 62 bits of the tag's SHA-256: two tags that collide
  # share a version, so invalidating one invalidates the other too, never less. Ids and versions
  # are 62-bit so that they are Integers Ruby does not allocate.
  #
  # Reads go top-down: the first tier holding a version answers, and the tiers above it get a
  # copy with add (a bump's newer copy wins). A version no tier holds is created bottom-up with
  # add: when add loses, the winner's value is read back and used, so every reader settles on
  # the authority's value. Bumps go bottom-up (set); a tier whose set fails has its copy deleted,
  # and the bump is false when that fails too.
  #
  # Safe to share between threads: no state changes after new.
  class Dependencies
    VERSION_PREFIX = "\x00strata:tag:".b.freeze
    KEY_FORMAT = "#{VERSION_PREFIX}%016x".b.freeze
    MASK = (1 << 62) - 1
    # Seconds the host tier keeps a copy of a version when tiers below it hold the authority.
    DEFAULT_COHERENCE_INTERVAL = 1.0
    VERSION_BYTES = 8
    # Seconds a polled copy of a version lives at most (#copy): the bound on a copy's
    # staleness when the poller missed a change it could not see (a log row whose transaction
    # committed after gap_timeout; Strata::Poller), and a tag read from below once per this
    # many seconds instead of once per coherence_interval.
    POLLED_TTL = 30
    PACK = "Q<"
    # Set in every version a soft invalidation made (#bump with stale_for:), clear in all others:
    # only a stamp that differs from such a version has its tag's soft record looked up, so an
    # entry a hard invalidation outdated costs one more read of the versions (the top tier's
    # copies, which the check before just read) before it is dropped.
    SOFT = 1 << 61
    # A soft invalidation's record, per tag, under SOFT_KEY_FORMAT in every tier, for stale_for
    # seconds: [its version, the unix ms it lapses at, the versions it left stale...] as
    # SOFT_PACK. The stale ones: the version it replaced, and those the tag's record then in
    # force had left stale, at most SOFT_OLDS.
    SOFT_KEY_FORMAT = "\x00strata:soft:%016x".b.freeze
    SOFT_PACK = "Q<*"
    SOFT_OLDS = 8
    # Seconds a record outlives its window in the tiers: memcached counts TTLs in whole seconds
    # of its own clock, so a TTL of 1 may end at once. The record's own deadline is the bound.
    SOFT_TTL_MARGIN = 1

    # The 64-bit id under which tag's version is kept and stamped.
    def self.tag_id(tag)
      Digest::SHA256.digest(tag).unpack1(PACK) & MASK
    end

    # list: the stack's Strata::TierList (its tiers, top first, and where their failures are
    # reported).
    # coherence_interval: seconds (> 0) a tier above the bottom keeps a version copied from below.
    # polled: whether a poller (Strata::Poller) keeps this host's copies current; the host tier's
    #   copies then live while it vouches for them (#copy), not coherence_interval.
    def initialize(list, coherence_interval: DEFAULT_COHERENCE_INTERVAL, polled: false)
      unless coherence_interval.is_a?(Numeric) && coherence_interval > 0
        raise ArgumentError, "coherence_interval must be a number of seconds > 0, got #{coherence_interval.inspect}"
      end

      @list = list
      @tiers = tiers = list.tiers
      @names = list.names
      bottom = tiers.size - 1
      # Every copy above the authority lapses after coherence_interval: the host tier's, so that
      # another host's bump is seen within it, and memcached's above SQL, so that a bump that
      # could neither set nor drop memcached's copy is not hidden behind it for good.
      @ttls = tiers.each_index.map { |index| (index < bottom) ? coherence_interval.to_f : nil }.freeze
      @host_index = list.index_of(:host)
      @coherence_interval = coherence_interval.to_f
      # The host tier when a poller keeps its copies current and it can keep polled copies.
      @polled = tiers[@host_index] if polled && @host_index && @host_index < bottom &&
        tiers[@host_index].capabilities[:polled_copies]
      # The top tier when it is the host tier and checks an entry's stamps itself (L1:
      # SharedMemory#check_stamps, one C call that makes no object): #current?'s fast path.
      @checker = tiers[0] if @host_index == 0 && tiers[0].capabilities[:stamp_check]
      # A tier that checks stamps itself (L1, in C) reads the versions under the keys made here.
      tiers.each { |tier| tier.version_key_prefix = VERSION_PREFIX if tier.capabilities[:stamp_check] }
      @keys = VersionKeys.new
      # How each tier keeps versions: by id where it keeps them apart (capability :versions),
      # else under version keys.
      @places = tiers.map { |tier| tier.capabilities[:versions] ? TierVersions.new(tier) : KeyedVersions.new(tier, @keys) }.freeze
    end

    attr_reader :coherence_interval

    # The reserved key under which a tier without capability :versions keeps tag id's version.
    def version_key(id)
      @keys[id]
    end

    # The versions kept in the tier named name, by tag id (a TierVersions or KeyedVersions: get,
    # get_multi, set, add, delete...), for tools and tests that reach one tier's copies.
    def versions_in(name)
      @places.fetch(@names.index(name) || raise(ArgumentError, "no tier #{name.inspect}"))
    end

    # The current versions of tag ids, in order (Integers). A missing one is created.
    def versions(ids)
      found = read(ids)
      ids.map { |id| found[id] || create(id) }
    end

    # Whether every dependency stamp of the stamped entry bytes is current. A version no tier
    # holds makes it false without creating one: a fresh one would not match anyway. Raises
    # Strata::CorruptError when the entry's header is malformed.
    #
    # The usual case is settled by the top tier alone, in one call that makes no object, when
    # it offers one (#check_stamps: true or false); what it can't settle (nil: a version it
    # does not hold or holds malformed) is read as below, lower tiers included.
    def current?(bytes)
      if @checker
        # A failure is reported by #read, which reads the top tier once more.
        answer = @list.unreported { @checker.check_stamps(bytes) }
        return answer unless answer.nil?
      end
      words = Entry.stamp_words(bytes)
      return current_one?(words[0], words[1]) if words.size == 2

      count = words.size / 2
      ids = Array.new(count) { |index| words[index * 2] }
      top = top_versions(ids)
      # The usual case: the top tier holds them all, well-formed: one call.
      if top.size == count
        index = 0
        while index < count
          bytes = top[ids[index]]
          break unless bytes.bytesize == VERSION_BYTES
          return false unless bytes.unpack1(PACK) == words[index * 2 + 1]

          index += 1
        end
        return true if index == count
      end

      found = read(ids)
      count.times do |index|
        return false unless found[ids[index]] == words[index * 2 + 1]
      end
      true
    end

    # Gives each tag id a new version, bottom-up through every tier: whatever depended on the
    # old one misses from then on. One write per tier and tag, whatever the number of entries
    # stamped with it. True when every tier took the new versions or now holds none. undone (an
    # Array) gets the ids whose authority, the bottom tier, did neither (Strata::Retries).
    #
    # stale_for: seconds (> 0) for a soft invalidation: what depended on the old version is
    # soft-stale (#soft_stale?) for that long, then misses. Its soft record is written first
    # (#soften), so that a reader who finds the new version finds the record.
    def bump(ids, undone = nil, stale_for: nil)
      fresh = ids.to_h { |id| [id, stale_for ? random_version | SOFT : random_version] }
      soften(fresh, stale_for) if stale_for
      fresh.transform_values! { |version| [version].pack(PACK) }
      ok = true
      bottom = @tiers.size - 1
      bottom.downto(0) do |index|
        fresh.each do |id, bytes|
          stored = @list.safely(index, nil, false) { @places[index].set(id, bytes, @ttls[index]) }
          next if stored || dropped?(id, index)

          ok = false
          undone << id if undone && index == bottom
        end
      end
      ok
    end

    # Whether the stamped entry bytes, found not current (#current?), are soft-stale: every
    # stamp that differs from its tag's version was left stale by a soft invalidation whose
    # window is open (its record, read top-down and copied up). The versions are read again
    # (they may have moved since the check); a stamp behind a hard version is never soft.
    def soft_stale?(bytes)
      words = Entry.stamp_words(bytes)
      ids = Array.new(words.size / 2) { |index| words[index * 2] }
      found = read(ids)
      now = Entry.now
      ids.each_with_index.all? do |id, index|
        stamped = words[index * 2 + 1]
        version = found[id]
        next true if version == stamped
        next false unless version && version & SOFT != 0

        record = soft_record(id, version, now)
        record ? record.drop(2).include?(stamped) : false
      end
    end

    # The seam for the cross-host poller (docs/coherence.md): this host's copy of tag id's
    # version becomes version (read from the invalidation log), or, without one, is dropped so
    # the next read takes the authority's. Only the host tier is written. True when done.
    def bump_local(id, version = nil)
      return true unless @host_index
      return dropped?(id, @host_index) unless version

      @list.safely(@host_index) { @places[@host_index].set(id, [version].pack(PACK), @ttls[@host_index]) } ||
        dropped?(id, @host_index)
    end

    # For the cross-host poller (Strata::Poller): the versions of tag ids were changed at the
    # authority (by another host, or a database trigger), so the copies above it that differ
    # from the authority's versions, read now, go, bottom-up (a copy above is never refilled
    # from an older one below); the next read takes the authority's. A copy equal to it is no
    # older than the change and stays (the bumping host's own). When the authority can't be
    # read, every copy goes. One multi-key read and delete per tier, whatever the number of
    # ids (a round trip each to memcached). True when every copy that had to go went (a
    # failure is reported); false too when a version's memcached server is down in this
    # process, whose delete is only noted for the server's return: until then another process
    # may read the old copy there (the poller keeps such ids and drops them again).
    def drop_copies(*ids)
      bottom = @tiers.size - 1
      authority = @list.safely(bottom) { @places[bottom].peek_multi(ids) }
      (bottom - 1).downto(0).map do |index|
        place = @places[index]
        away = ids.select { |id| place.away?(id) }
        held = authority ? read_many(ids, index) : NONE
        stale = (authority ? ids.reject { |id| held[id] == authority[id] } : ids) | away
        (stale.empty? || dropped_all?(stale, index)) && away.empty?
      end.all?
    end

    private

    # #current? for one stamp: the top tier's get, then #read.
    def current_one?(id, version)
      bytes = @list.unreported { @places[0].get(id) } # a failure: reported by #read, which reads it again
      return bytes.unpack1(PACK) == version if bytes&.bytesize == VERSION_BYTES

      read([id])[id] == version
    end

    # id => bytes the top tier holds (one multi-key call), or none when it fails (reported
    # again by #read, which reads it once more).
    def top_versions(ids)
      @list.unreported(NONE) { @places[0].get_multi(ids) }
    end

    NONE = {}.freeze
    # #create's word for a tier that failed (reported), not one that refused.
    FAILED = Object.new.freeze

    # id => version for the ids some tier holds, top-down; copies go up to the tiers above.
    def read(ids)
      found = {}
      missing = ids
      @places.each_with_index do |place, index|
        hits = @list.answering(index) { place.get_multi(missing) }
        hits.each do |id, bytes|
          version = decode(id, bytes, index)
          next unless version

          found[id] = version
          copy_up(id, bytes, index)
        end
        missing = missing.reject { |id| found.key?(id) }
        break if missing.empty?
      end
      found
    end

    # Copies a version read at index into the tiers above with add: one there now was put there
    # by a bump since (or by another reader's copy of the same value) and stays. A copy that
    # landed after a bump whose own copy above was evicted would hold the old value, so the
    # source is read again after the copy; when it changed meanwhile the copies above go.
    def copy_up(id, bytes, index)
      return if index == 0

      index.times { |above| @list.safely(above) { copy(above, id, bytes) } }
      again = @list.safely(index) { @places[index].get(id) }
      index.times { |above| dropped?(id, above) } unless again == bytes
    end

    # Creates a missing version bottom-up: the lowest tier that answers settles it (its value, if
    # another reader added one first), then the tiers above take a copy. A version no tier could
    # store is still fresh: what is stamped with it never matches anything and misses.
    def create(id)
      bytes = [random_version].pack(PACK)
      settled = nil
      (@tiers.size - 1).downto(0) do |index|
        place = @places[index]
        unless settled
          added = @list.safely(index, nil, FAILED) { place.add(id, bytes, @ttls[index]) }
          next if FAILED.equal?(added) # the tier above settles it
          unless added
            winner = @list.safely(index) { place.get(id) }
            bytes = winner if winner && decode(id, winner, index)
          end
          settled = index
          next
        end
        @list.safely(index) { place.add(id, bytes, @ttls[index]) }
      end
      bytes.unpack1(PACK)
    end

    # #copy_up's add of a version's bytes to the tier at index, which #copy_up reads the source
    # again after, dropping the copy if it changed: so a change the poller applied before the
    # copy landed is not hidden behind it. The host tier's copy is, when a poller keeps it
    # current and vouches for the table now, a polled one (table.h, POLLED ITEMS): it lives
    # while the poller goes on vouching (each round that read and applied the whole log vouches
    # for coherence_interval past its start), up to POLLED_TTL, instead of lapsing every
    # coherence_interval. When the poller has stopped vouching (its process stopped, the
    # database down) polled copies read as absent, and new copies are plain ones that lapse
    # after coherence_interval, as without a poller. A bump's and a creation's copies are plain
    # ones: nothing reads the authority after them.
    def copy(index, id, bytes)
      tier = @tiers[index]
      return tier.add_polled(version_key(id), bytes, POLLED_TTL) if tier.equal?(@polled) && tier.polled_until > Entry.now

      @places[index].add(id, bytes, @ttls[index])
    end

    # A version's value, or nil when the bytes held for tag id are not one (then dropped, so
    # that a read creates a fresh one).
    def decode(id, bytes, index)
      return bytes.unpack1(PACK) if bytes.bytesize == VERSION_BYTES

      @list.failed(CorruptError.new("#{@names[index]}: the version of tag id #{id} is #{bytes.bytesize} bytes"), index)
      dropped?(id, index)
      nil
    end

    # A random version that is not a soft one (SOFT clear).
    def random_version
      SecureRandom.random_bytes(VERSION_BYTES).unpack1(PACK) & MASK & ~SOFT
    end

    # Writes each tag's soft record (see SOFT_KEY_FORMAT) for its new version in fresh (id =>
    # version), bottom-up through every tier; a tier that fails is reported and skipped (its
    # readers then find the tag invalidated hard). A tag with no version has nothing stamped
    # with one and gets no record.
    def soften(fresh, stale_for)
      now = Entry.now
      deadline = now + (stale_for * 1000).ceil
      held = read(fresh.keys)
      fresh.each do |id, version|
        old = held[id]
        next unless old

        record = soft_record(id, old, now)
        bytes = [version, deadline, *[old, *record&.drop(2)].uniq.first(SOFT_OLDS)].pack(SOFT_PACK)
        key = format(SOFT_KEY_FORMAT, id)
        ttl = stale_for + SOFT_TTL_MARGIN
        (@tiers.size - 1).downto(0) { |index| @list.safely(index) { @tiers[index].set(key, bytes, ttl: ttl) } }
      end
    end

    # Tag id's soft record for its current version (version), unpacked, while its window is
    # open at now (unix ms); nil when none is. Read top-down; the tiers above the one that held
    # it get a copy for the rest of the window (set over another version's record, else add).
    def soft_record(id, version, now)
      key = format(SOFT_KEY_FORMAT, id)
      others = []
      @tiers.each_index do |index|
        bytes = @list.safely(index) { @tiers[index].get(key) }
        next unless bytes && bytes.bytesize >= 24 && bytes.bytesize % 8 == 0

        record = bytes.unpack(SOFT_PACK)
        unless record[0] == version && record[1] > now
          others << index
          next
        end
        ttl = (record[1] - now) / 1000.0 + SOFT_TTL_MARGIN
        index.times do |above|
          @list.safely(above) { others.include?(above) ? @tiers[above].set(key, bytes, ttl: ttl) : @tiers[above].add(key, bytes, ttl: ttl) }
        end
        return record
      end
      nil
    end

    # Tier index's copies of the versions of ids; none of those it could not read (reported).
    def read_many(ids, index)
      @list.answering(index) { @places[index].peek_multi(ids) }
    end

    # Deletes the versions of ids from tier index: whether every delete went through (a
    # failure is reported).
    def dropped_all?(ids, index)
      @list.safely(index, nil, false) { @places[index].delete_multi(ids) || true }
    end

    def dropped?(id, index)
      @list.safely(index, nil, false) { @places[index].delete(id) || true }
    end
  end
end
