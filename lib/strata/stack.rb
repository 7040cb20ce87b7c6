# frozen_string_literal: true

require "strata/errors"
require "strata/tier_list"
require "strata/entry"
require "strata/dependencies"
require "strata/copies"
require "strata/single_flight"

module Strata
  # An ordered list of tiers, top (fastest) first, used as one cache (docs/architecture.md).
  # It knows the tiers only through the Tier contract and moves entry bytes between them:
  #
  # - get reads through: the first tier that has the key answers, and the tiers above it are
  #   backfilled with the entry's remaining time to live.
  # - set writes through bottom-up, then checks the bottom (see #set); add writes top to bottom.
  # - delete and invalidate go bottom-up, so an upper tier is never refilled from a lower tier that
  #   still holds the old value (see #delete for the fills that race them).
  # - incr and decr run on the bottom-most tier with counters; the copies in the other tiers with
  #   counters are dropped. Counter bytes are only ever written to tiers with counters (when there
  #   is one), so a counter costs a tier without them (SQL) nothing.
  #
  # - read_through is a fetch's read and write of one key, with single-flight: one fill per key
  #   per host and across hosts. It hands the caller a Strata::ReadThrough to read, write and end
  #   it through; the protocol is SingleFlight's.
  #
  # A tier that raises Strata::TierError is skipped for that call. The stack hands the error and the
  # tier's name to on_error and goes on with the next tier; it never raises a TierError itself.
  #
  # Dependency stamps (Strata::Dependencies, docs/coherence.md): an entry with stamps that are
  # not all current is a miss wherever it is read (get, get_host, get_multi, read-through), and
  # its copy in the tier that held it is deleted (it can never be valid again), so a fill can
  # take its place. A current one is returned as it is: its stamps are in its bytes
  # (Entry.stamp_words), for the adapter to add to the entry being computed around the read.
  # An untagged entry costs one byte's look.
  #
  # Thread and process safety are the tiers': the stack keeps no state that changes after new.
  class Stack
    NO_HITS = {}.freeze
    NO_KEYS = [].freeze
    # The smallest value whose write asks the bottom tier for a token (Tier write_tokens) for its
    # read-back: a smaller one comes back in one packet, as the token would, and the token's
    # longer request and reply would cost more than they save.
    WRITE_TOKEN_MIN = 4096
    # Seconds a read-through waits for another caller's fill before computing itself.
    DEFAULT_FILL_WAIT = 2.0

    # tiers: a Hash of name => tier, top first, e.g. {l1: shared_memory}.
    # on_error: called as on_error.call(error, tier_name) for each tier failure; nil ignores them.
    # fill_wait: seconds a read-through waits for another caller's fill (0: no single-flight).
    # coherence_interval: seconds the host tier keeps a tag version read from below (Dependencies).
    # polled: whether a poller keeps the host tier's copies of tag versions current (Dependencies).
    # host_ttl: seconds (> 0) the host tier keeps an entry at most, whatever its TTL; nil: no
    #   cap. With a tier shared by hosts below it (memcached) and nothing else to tell this host
    #   of their writes (no poller), another host's write or delete of a key then reaches this
    #   host's copy within host_ttl: the copy lapses, and the next read takes the shared tier's.
    # counters: a Strata::Counters: each tier with a Tier#counter_row counts its figures there
    #   (and the stack its failures), and the read-through its waits and stale hits; nil: none.
    # undurable: called as undurable.call(keys) with the keys whose write or delete the bottom
    #   tier, when it has tombstones (SQL, the durable one), neither made nor undid by dropping
    #   its copy: it failed, and holds what the change replaced. The copies above it are dropped
    #   too, and the call is false; the caller deletes the keys there once it answers
    #   (#redelete, Strata::Retries). nil: nobody.
    def initialize(tiers, on_error: nil, fill_wait: DEFAULT_FILL_WAIT,
      coherence_interval: Dependencies::DEFAULT_COHERENCE_INTERVAL, polled: false, host_ttl: nil,
      counters: nil, undurable: nil)
      raise ArgumentError, "fill_wait must be a number of seconds >= 0" unless fill_wait.is_a?(Numeric) && fill_wait >= 0

      @fill_wait = fill_wait
      @list = TierList.new(tiers, on_error: on_error, counters: counters)
      @names = @list.names
      @tiers = @list.tiers
      @counters = @tiers.rindex { |tier| tier.capabilities[:counters] }
      @counter_tiers = @list.capable(:counters)
      # The bottom tier's index when its writes answer tokens (Tier write_tokens) and tiers above
      # it take copies, which #settle checks against it: it is the lowest tier of every write it
      # stores. (Above another tier, its token would go unused.) Asked for values of
      # WRITE_TOKEN_MIN bytes or more.
      @token_at = (@tiers.size - 1) if @tiers.size > 1 && @tiers.last.capabilities[:write_tokens]
      @top_down = (0...@tiers.size).to_a.freeze
      @bottom_up = @top_down.reverse.freeze
      @host_index = @list.index_of(:host)
      leased = @list.index_of(:leases)
      below_lease = leased ? (@tiers.size - 1).downto(leased + 1).to_a : []
      @unfenced_below_lease = below_lease.reject { |index| @tiers[index].capabilities[:tombstones] }.freeze
      @undurable = undurable
      # The bottom tier's index when it keeps tombstones (the durable tier), else nil.
      @durable = (@tiers.size - 1) if @tiers.last.capabilities[:tombstones]
      @dependencies = Dependencies.new(@list, coherence_interval: coherence_interval, polled: polled)
      if host_ttl && !(host_ttl.is_a?(Numeric) && host_ttl > 0)
        raise ArgumentError, "host_ttl must be nil or a number of seconds > 0, got #{host_ttl.inspect}"
      end

      @host_ttl = host_ttl&.to_f
      @copies = Copies.new(@list, @dependencies, host_ttl: host_ttl)
      @single_flight = (SingleFlight.new(@list, fill_wait, @copies, counters: counters) if fill_wait > 0)
      # Whether #get reads below the host tier under its fill lock (its TTL is fill_wait).
      @lock_reads = fill_wait > 0 && !@host_index.nil? && @host_index < @tiers.size - 1
    end

    # The tag versions kept in these tiers (Strata::Dependencies).
    attr_reader :dependencies
    # Seconds the host tier keeps an entry at most (a Float), or nil: see new.
    attr_reader :host_ttl
    # Seconds a read-through waits for another caller's fill (0: no single-flight).
    attr_reader :fill_wait

    # Whether the host tier is the only tier: what it lacks, no tier holds.
    def host_only?
      @host_index == 0 && @tiers.size == 1
    end

    # The tier names, top first.
    def tier_names
      @names
    end

    # The tier called name, or nil.
    def [](name)
      index = @names.index(name)
      index && @tiers[index]
    end

    # The entry bytes under key, or nil. When info (a Hash, e.g. an instrumentation payload) is
    # given, info[:tier] is set to the name of the tier that answered, and info[:failed_tiers]
    # lists the tiers that raised.
    #
    # After a miss in the host tier, the tiers below are read under the key's host fill lock
    # (#lock_below), so that the host tier's copy of what they hold is fenced as a fill's is.
    def get(key, info = nil)
      index = 0
      host_lock = nil
      # Visits each tier at most once.
      while index < @tiers.size
        bytes = begin
          @tiers[index].get(key)
        rescue TierError => error
          @list.failed(error, index, info)
          index += 1
          next # a host tier that failed is not asked for its lock: one report per failure
        end
        bytes = @copies.current(key, bytes, index) if bytes && Entry.stamped?(bytes)
        if bytes
          info[:tier] = @names[index] if info
          @copies.backfill(key, bytes, index, host_lock) if index > 0
          return bytes
        end
        host_lock = lock_below(key) if @lock_reads && index == @host_index
        index += 1
      end
      nil
    ensure
      @list.safely(@host_index) { @tiers[@host_index].unlock_fill(key, host_lock) } if host_lock
    end

    # The bytes under key in the top tier when it is the host tier (a miss there costs next to
    # nothing to repeat), else nil without reading. For a probe before a read-through.
    #
    # The host tier checks a stamped entry's stamps in the same call (Tier#get_current; L1 against
    # its own copies of the tag versions, as Dependencies#current? would first): what it passed
    # is current. What it did not pass is read again and checked as any read does, lower tiers
    # included, and dropped when out of date.
    def get_host(key)
      return nil unless @host_index == 0

      bytes = @tiers[0].get_current(key)
      return bytes if bytes
      return nil if bytes.nil?

      host_settled(key)
    end

    # #get_host for a reader that takes an entry holding a bare String as its value, and wants
    # no entry's stamps (the caller's word: no computation of its is under way): the value
    # String of such an entry, current, read and checked in one call of the host tier
    # (Tier#get_current_plain); [bytes] for any other bytes #get_host would return; nil for
    # what it returns nil for.
    def get_host_plain(key)
      return nil unless @host_index == 0

      found = @tiers[0].get_current_plain(key)
      return found unless false.equal?(found)

      bytes = host_settled(key)
      bytes && [bytes]
    end

    # The read-through of key: a Strata::ReadThrough, through which the caller reads key
    # (ReadThrough#get: nil when it is to compute the value), writes what it computed
    # (ReadThrough#set: the fill) and ends it (ReadThrough#finish: the host lock and an unused
    # lease given back). With a block, yields it, finishes it after, and returns the block's value; without one, returns it, and the caller
    # must finish it (ensure). With fill_wait 0 it reads and writes as #get and #set do.
    # host_probed: the caller has just read key with #get_host, which found nothing live; the
    # read-through then skips its own first read of the host tier.
    def read_through(key, host_probed = false)
      through = ReadThrough.new(self, @single_flight, key, host_probed && @host_index == 0)
      return through unless block_given?

      begin
        yield through
      ensure
        through.finish
      end
    end

    # A Hash of key => bytes for the keys found. info[:tier] names the lowest tier that answered.
    def get_multi(keys, info = nil)
      found = {}
      missing = keys
      @tiers.each_with_index do |tier, index|
        break if missing.empty?

        hits = @list.answering(index, info) { tier.get_multi(missing) }
        next if hits.empty?

        info[:tier] = @names[index] if info
        copied = {}
        hits.each do |key, bytes|
          # A soft-stale one as the copy Copies#current made of it (which copy_up passes over).
          next if Entry.stamped?(bytes) && !(bytes = @copies.current(key, bytes, index))

          found[key] = bytes
          copied[key] = index if index > 0 && @copies.copy_up(key, bytes, index)
        end
        @copies.settle_multi(found, copied) unless copied.empty? # as #backfill does
        missing = keys.reject { |key| found.key?(key) } if index + 1 < @tiers.size
      end
      found
    end

    # The host tier's read of a page of named keys for a reader that takes an entry holding a
    # bare String as its value, and wants no entry's stamps (the caller's word):
    # Tier#get_plain_named's [values, held, rest] (each name's key prefix + name), in one call of
    # the tier, stamps checked there. nil when the host tier is not the top one or the call
    # failed: the caller then reads every key through #get_multi (which reports a failure).
    def get_multi_plain(names, prefix, max_key_bytes, info = nil)
      return nil unless @host_index == 0

      answer = @tiers[0].get_plain_named(names, prefix, max_key_bytes)
      info[:tier] = @names[0] if info && answer[2].size != names.size
      answer
    rescue TierError
      nil
    end

    # Store bytes in every tier, bottom-up. True when a tier stored it, none refused, and every
    # tier that failed now reads key as a miss. A tier that refuses, fails (see #write_tiers) or
    # can't hold a value that large has its old copy dropped, so it can't serve the value this
    # write replaced; false when that drop failed too. Raises Strata::ValueTooLargeError when no
    # tier could hold the value. (A read-through's fill goes through ReadThrough#set instead.)
    #
    # Concurrent writers of one key: written top-down, two writers can leave different values in
    # different tiers for good (A above, B below). Written bottom-up and then checked against the
    # lowest tier that stored it (see settle), the tiers end up agreeing with that tier.
    def set(key, bytes, ttl: nil)
      refused = false
      lowest = nil
      token = nil
      # The tier asked for a token (see @token_at), if any.
      token_at = @token_at if @token_at && bytes.bytesize >= WRITE_TOKEN_MIN
      counter = @counters && Entry.counter?(bytes)
      stored = write_tiers(key, @bottom_up) do |tier, index|
        if counter && !@counter_tiers[index]
          # Counter bytes stay out of the tiers without counters (see count), but what such a
          # tier held under key is what this write replaces: it goes.
          refused = true unless dropped?(key, index)
          next false
        end
        if token_at && index == token_at
          token = tier.set(key, bytes, ttl: @copies.ttl_at(index, ttl), token: true)
          if token
            lowest = index # the bottom tier: the first to store
            next true
          end
        elsif tier.set(key, bytes, ttl: @copies.ttl_at(index, ttl))
          lowest ||= index
          next true
        end

        refused = true
        @list.failed(TierError.new("#{@names[index]} did not store the value", tier: @names[index]), index)
        @list.drop(key, index)
        false
      end
      return missed_below(key) if stored == :undurable

      @copies.settle(key, bytes, lowest, token) if lowest && lowest > 0
      stored && !refused
    end

    # #set for many keys: one multi-key call per tier, bottom-up, then one settle read per tier
    # (#settle_multi). A Hash of key => true when a tier stored it, none refused, and every tier
    # that failed on it reads it as a miss. A tier that refuses a key (or can't hold its value)
    # has its old copy dropped; a tier that fails is reported, the keys it answered for
    # (PartialError) count, and the others are dropped from it in one call: a key it still can't
    # drop is false. A key the durable tier failed on and still holds is written in no tier
    # above: its copies there go, and new's undurable hears of it. Counter bytes go one by one
    # through #set, which keeps them out of the tiers without counters.
    def set_multi(entries, ttl: nil)
      counters, plain = entries.partition { |_key, bytes| @counters && Entry.counter?(bytes) }
      results = counters.to_h { |key, bytes| [key, set(key, bytes, ttl: ttl)] }
      return results if plain.empty?

      plain = plain.to_h
      lowest = {}
      tokens = {} # key => the token its lowest tier's write answered (Tier write_tokens)
      refused = {}
      missed = nil
      @bottom_up.each do |index|
        stored, reported = set_multi_on(index, plain, ttl)
        # Keys the tier failed on: it may still hold the values these writes replace.
        kept = drop_unanswered(plain, stored, index, refused) if reported && stored.size < plain.size
        if kept && index == @durable && @undurable && !kept.empty?
          # The durable tier still holds what these writes replace: no tier above takes them.
          missed = kept
          plain = plain.except(*kept)
        end
        refusals = 0
        stored.each do |key, ok|
          if ok
            next if lowest.key?(key)

            lowest[key] = index
            tokens[key] = ok if ok.is_a?(Integer)
            next
          end

          refusals += 1
          refused[key] = true
          # A tier that raised PartialError removed the old copies of what it refused itself.
          @list.drop(key, index) unless reported
        end
        next if refusals.zero? || reported

        @list.failed(TierError.new("#{@names[index]} did not store #{refusals} of #{plain.size} values", tier: @names[index]), index)
      end
      @copies.settle_multi(plain, lowest, tokens)
      plain.each_key { |key| results[key] = lowest.key?(key) && !refused.key?(key) }
      missed_below_multi(missed, results) if missed
      results
    end

    # Replaces stale (bytes read under key) with bytes: a compare-and-set at the bottom tier
    # (Tier#replace), then the tiers above written and settled as #set does. False, nothing
    # written and the copies above the bottom tier dropped, when it no longer holds stale (a
    # write or delete since wins) or failed (reported). Raises Strata::ValueTooLargeError when
    # the bottom tier can't hold it.
    def replace(key, stale, bytes, ttl: nil)
      bottom = @tiers.size - 1
      unless @list.safely(bottom, nil, false) { @tiers[bottom].replace(key, stale, bytes, ttl: @copies.ttl_at(bottom, ttl)) }
        # The bottom tier holds something else (or failed): the copies above may be the stale
        # entry, which a reader would otherwise go on answering.
        @copies.take_back_copies(key, bottom)
        return false
      end

      (bottom - 1).downto(0) do |index|
        stored = begin
          @list.safely(index) { @tiers[index].set(key, bytes, ttl: @copies.ttl_at(index, ttl)) }
        rescue ValueTooLargeError
          false
        end
        @list.drop(key, index) unless stored
      end
      @copies.settle(key, bytes, bottom) if bottom > 0
      true
    end

    # A claim on key (one of the stack's own) for ttl seconds: an add in every tier but those
    # with tombstones (SQL), top-down, so one caller holds it per host with L1 and across hosts
    # with memcached. False when another holds it. The adds made above a tier that refused are
    # kept: the host's other callers then find the claim taken in L1, without asking memcached,
    # until it lapses. A tier that fails is reported and skipped, as single-flight skips it:
    # with memcached down, one caller per host claims.
    def claim(key, ttl)
      @tiers.each_with_index do |tier, index|
        next if tier.capabilities[:tombstones]

        taken = @list.safely(index, nil, :failed) { tier.add(key, MARK, ttl: ttl) }
        return false unless taken
      end
      true
    end

    # Gives a #claim back.
    def release(key)
      @tiers.each_with_index { |tier, index| @list.drop(key, index) unless tier.capabilities[:tombstones] }
      nil
    end

    # Store bytes only where key is absent, top to bottom. When a tier already holds key, the copies
    # just added above it are dropped again and the answer is false. An entry whose stamps are out
    # of date counts as absent: it is dropped, and the add tried again once.
    def add(key, bytes, ttl: nil)
      added = write_tiers(key, @top_down) do |tier, index|
        tier_ttl = @copies.ttl_at(index, ttl)
        next true if tier.add(key, bytes, ttl: tier_ttl)
        next true if outdated?(key, index) && tier.add(key, bytes, ttl: tier_ttl)

        index.times { |above| @list.drop(key, above) }
        return false
      end
      (added == :undurable) ? missed_below(key) : added
    end

    # Remove key from every tier, bottom-up. True if a tier held it.
    #
    # A fill writes the tiers other than its leased tier (memcached) before the lease commits it
    # there. One that read before this delete could write the SQL tier just after the delete
    # cleared it and still commit in memcached before the delete reaches memcached, which would
    # leave the value computed before the delete in the SQL tier for the next reader to find. A
    # tier with tombstones (SQL) refuses such a write: its delete leaves a tombstone that the
    # fill did not read. A tier without them below the leased one is cleared again once the
    # leased tier is done: such a fill committed before that, so it wrote below before it. (A
    # fill that commits later is refused, and drops its own copies.)
    def delete(key)
      deleted = false
      return missed_below(key) if removing(key) { |tier| deleted = true if tier.delete(key) } == :undurable

      deleted
    end

    # For keys whose write or delete the durable tier missed (see new's undurable): deletes
    # them there (a tombstone, and a log row where it keeps the log), then from every tier
    # above. The keys it still could not delete there.
    def redelete(keys)
      done = @list.answering(@durable) { @tiers[@durable].delete_multi(keys) }
      gone = keys.select { |key| done.key?(key) }
      @durable.times { |index| @list.safely(index) { @tiers[index].delete_multi(gone) } } unless gone.empty?
      keys - gone
    end

    # Remove keys from every tier, bottom-up, one call per tier (memcached: one pipeline per
    # server), then clear the tiers below a leased one that have no tombstones again (see
    # #delete). The keys that some tier held. new's undurable hears of the keys the durable tier
    # failed on.
    def delete_multi(keys)
      deleted = {}
      missed = nil
      (@tiers.size - 1).downto(0) do |index|
        results = @list.answering(index) { @tiers[index].delete_multi(keys) }
        results.each { |key, was_there| deleted[key] = true if was_there }
        # The durable tier still holds what these deletes remove: deleted there later (Retries).
        missed = keys.reject { |key| results.key?(key) } if index == @durable && @undurable && results.size < keys.size
      end
      @unfenced_below_lease.each { |index| @list.safely(index) { @tiers[index].delete_multi(keys) } }
      @undurable.call(missed) if missed && !missed.empty?
      deleted.keys
    end

    # Takes back what writes and deletes of keys left above the bottom tier, which undid them
    # (an app's transaction they joined rolled back): drops keys from every tier above it, then
    # appends their key rows to its invalidation log, if it keeps one, so that every host's
    # poller drops the copies it took meanwhile (Tiers::SQL#log_keys).
    def retract(keys)
      bottom = @tiers.size - 1
      bottom.times { |index| @list.safely(index) { @tiers[index].delete_multi(keys) } }
      tier = @tiers[bottom]
      @list.safely(bottom) { tier.log_keys(keys) } if tier.capabilities[:invalidation_log]
      nil
    end

    # Mark key stale in every tier, bottom-up (tiers without stale copies delete it; see #delete
    # for the fills that race it).
    def invalidate(key)
      removing(key) { |tier| tier.invalidate(key) }
      nil
    end

    # Add amount to the counter under key on the bottom-most tier with counters, then drop the
    # copies in the other tiers. The new value, or nil (no counter tier, key absent without an
    # initial, a value that isn't a counter, or a failure).
    def incr(key, amount = 1, ttl: nil, initial: nil)
      count(:incr, key, amount, ttl, initial)
    end

    # Like incr, subtracting; a tier counter never goes below zero.
    def decr(key, amount = 1, ttl: nil, initial: nil)
      count(:decr, key, amount, ttl, initial)
    end

    # Empty every tier, bottom-up. True when every tier was emptied.
    def clear
      (@tiers.size - 1).downto(0).map { |index| @list.safely(index, nil, false) { @tiers[index].clear || true } }.all?
    end

    # Drop expired entries from the tiers that can sweep themselves. The number removed.
    def cleanup
      @tiers.each_with_index.sum do |tier, index|
        tier.capabilities[:sweeping] ? @list.safely(index, nil, 0) { tier.cleanup } : 0
      end
    end

    # The live keys of the tiers that can list theirs (a networked tier can't), without repeats;
    # never the stack's own (locks, tag versions).
    def keys
      listed = @tiers.each_with_index.flat_map do |tier, index|
        tier.capabilities[:listing] ? @list.safely(index, nil, NO_KEYS) { tier.keys }.reject { |key| reserved_key?(key) } : NO_KEYS
      end
      (@tiers.size == 1) ? listed : listed.uniq
    end

    # name => the tier's stats, for the tiers that answer.
    def stats
      @tiers.each_with_index.with_object({}) do |(tier, index), all|
        stats = @list.safely(index) { tier.stats }
        all[@names[index]] = stats if stats
      end
    end

    # Release every tier's files and connections.
    def close
      @tiers.each(&:close)
      nil
    end

    # A mark under key (one of the stack's own: a NUL byte first) in the top tier only, for ttl
    # seconds: a hint the processes sharing that tier see (on L1, one host's), such as the
    # fail-safe throttle. Best effort: a failure is reported, and the mark is simply absent.
    def mark(key, ttl)
      @list.safely(0) { @tiers[0].set(key, MARK, ttl: ttl) }
    end

    # Whether the top tier holds a mark under key (#mark).
    def marked?(key)
      !@list.safely(0) { @tiers[0].get(key) }.nil?
    end

    MARK = "1"

    # Whether key is one of the stack's own (a lock, a tag version), not a cache entry: they
    # start with a NUL byte, which no cache key does.
    def reserved_key?(key)
      key.getbyte(0) == 0
    end

    private

    # The key's host fill lock for #get's reads below the host tier (Tier#lock_fill's answer,
    # for fill_wait at most; nil when the host tier failed). A write or delete on this host marks
    # it, and a change from another host marks it when the poller drops the key; the copy into
    # the host tier is then refused (Copies#backfill). Unfenced, the host's other processes could
    # read what a change had overtaken until the read's settle dropped it, and for its TTL if
    # the reader died first. While another caller holds the lock (a fill), nothing is copied
    # there: the holder's own copy or fill is due. Where there is no lock to be had (the word is
    # another key's, or the host tier failed), the copy is a plain set.
    def lock_below(key)
      @list.safely(@host_index) { @tiers[@host_index].lock_fill(key, @fill_wait) }
    end

    # The host tier's copy of a stamped entry whose stamps it could not settle alone (its
    # get_current said false): read again, and checked through the lower tiers' versions.
    def host_settled(key)
      bytes = @tiers[0].probe(key)
      (bytes && Entry.stamped?(bytes)) ? @copies.current(key, bytes, 0) : bytes
    end

    # Whether tier index holds a stamped entry under key that is out of date (now dropped). A
    # read that fails says no (reported): the add then stays refused, as it was.
    def outdated?(key, index)
      held = @list.safely(index) { @tiers[index].get(key) }
      held && Entry.stamped?(held) && !@copies.current(key, held, index)
    end

    # Yields each tier, in the order of indexes, for a write; true when some tier's write returned
    # true and every tier that failed now reads key as a miss; :undurable when the durable tier
    # failed and still holds its old copy (and new has an undurable to tell). A tier that can't
    # hold a value that large has its old copy dropped (and is reported when another tier stored
    # the value); a tier that fails is reported and its old copy dropped too: a failed write may
    # have left the value it was to replace, which would come back once the tiers above let the
    # new one go (an L1 eviction). A drop that fails as well makes the write false. Raises
    # Strata::ValueTooLargeError when no tier stored the value.
    def write_tiers(key, indexes)
      stored = false
      stale = false # a tier failed and may still hold an older value
      too_large = nil
      lost = false # the durable tier failed and still holds its old copy
      indexes.each do |index|
        stored = true if yield(@tiers[index], index)
      rescue ValueTooLargeError => error
        too_large = [error, index]
        stale = true unless dropped?(key, index)
      rescue TierError => error
        @list.failed(error, index)
        next if dropped?(key, index)

        stale = true
        lost = true if index == @durable && @undurable
      end
      return :undurable if lost
      if too_large
        raise too_large.first unless stored

        @list.failed(*too_large) # the caller hears of it, though another tier holds the value
      end
      stored && !stale
    end

    # #drop, and whether it went through (a failure is reported).
    def dropped?(key, index)
      @list.safely(index, nil, false) { @tiers[index].delete(key) || true }
    end

    # After tier index's set_multi of entries failed for the keys missing from stored: drops
    # them there in one call, and marks in refused those it could not drop (the tier may still
    # hold the values the write replaces).
    def drop_unanswered(entries, stored, index, refused)
      unanswered = entries.keys.reject { |key| stored.key?(key) }
      dropped = @list.answering(index) { @tiers[index].delete_multi(unanswered) }
      kept = unanswered.reject { |key| dropped.key?(key) }
      kept.each { |key| refused[key] = true }
      kept
    end

    # #missed_below for many keys: their copies above the durable tier go, and the caller hears
    # of them; results[key] is false for each.
    def missed_below_multi(keys, results)
      @durable.times { |index| @list.safely(index) { @tiers[index].delete_multi(keys) } }
      @undurable.call(keys)
      keys.each { |key| results[key] = false }
    end

    # Yields each tier bottom-up for a delete or invalidate of key (a tier that fails is reported
    # and skipped), then clears the tiers below a leased one that have no tombstones again (see
    # #delete).
    def removing(key)
      lost = false
      @bottom_up.each do |index|
        yield @tiers[index]
      rescue TierError => error
        @list.failed(error, index)
        lost = true if index == @durable && @undurable
      end
      @unfenced_below_lease.each { |index| @list.drop(key, index) }
      lost ? :undurable : nil
    end

    # The durable tier missed a change of key (see new's undurable): the copies above it go
    # too, and the caller hears of the key. False: the change was not made.
    def missed_below(key)
      @copies.take_back_copies(key, @durable)
      @undurable.call([key])
      false
    end

    # tier index's set_multi of entries: [{key => stored}, whether a failure was reported]. A key
    # the tier did not answer for (it failed, wholly or on one server) is absent.
    def set_multi_on(index, entries, ttl)
      tier = @tiers[index]
      tier_ttl = @copies.ttl_at(index, ttl)
      tokens = index == @token_at && entries.each_value.any? { |bytes| bytes.bytesize >= WRITE_TOKEN_MIN }
      [tokens ? tier.set_multi(entries, ttl: tier_ttl, tokens: true) : tier.set_multi(entries, ttl: tier_ttl), false]
    rescue PartialError => error
      @list.failed(error, index)
      [error.result, true]
    rescue TierError => error
      @list.failed(error, index)
      [NO_HITS, true]
    end

    def count(operation, key, amount, ttl, initial)
      return nil unless @counters

      value = @list.safely(@counters) { @tiers[@counters].public_send(operation, key, amount, ttl: ttl, initial: initial) }
      @tiers.each_index { |index| @list.drop(key, index) if @counter_tiers[index] && index != @counters }
      value
    end
  end
end
