# frozen_string_literal: true

require "strata/entry"

module Strata
  # The tier contract. A tier stores opaque byte strings under byte-string keys;
  # it never deserializes a payload. Every tier includes this module and overrides the hooks below.
  #
  # Failure: a tier signals trouble by raising Strata::TierError (or a subclass). It does not rescue
  # broadly and does not log; the stack decides how to fail open.
  #
  # TTLs are seconds (Integer or Float); nil or 0 means no expiry.
  module Tier
    # What a tier can do natively. The stack falls back to what it can guarantee when a flag is false.
    # leases:   cluster-wide fill leases (mg N / ms C).
    # stale:    invalidate keeps a stale copy that readers may be served while one refills.
    # cas:      compare-and-set on a token returned by #get_with_cas.
    # counters: atomic incr/decr across every client of the tier.
    # host:     shared by every process of one host (and only them); the stack takes its host
    #           single-flight lock there (#lock_fill).
    # tombstones: delete leaves a marker that refuses the fill of a read-through which read the
    #           key before it (#get_for_fill, #add_for_fill). Without it, a fill is a plain add.
    # write_tokens: #set takes token: true and #set_multi tokens: true, and may then answer, for
    #           what they stored, a token (an Integer) in place of true that only that write
    #           gave; #holds? and #write_tokens tell later whether key still holds that write,
    #           without reading its value back (Copies#settle).
    # listing:  #keys lists the keys it holds (a networked tier can't).
    # sweeping: #cleanup drops its expired entries and answers how many.
    # invalidation_log: every change also appends to a log that other hosts' pollers read
    #           (#log_after, #log_keys); Strata::Poller polls the first such tier.
    # polled_copies: #add_polled stores a copy that is live only while a poller vouches for it
    #           (#polled_until=); Strata::Dependencies keeps tag versions there.
    # stamp_check: #check_stamps checks a stamped entry's tag versions in the tier itself, as
    #           #get_current and its kin do: those it holds under the keys Dependencies makes
    #           (the prefix it gives #version_key_prefix=, then the tag id in 16 hex digits);
    #           until it is given, none is settled there.
    # gutter:   #gutter?(key) tells whether key's own server is away and a stand-in serves it.
    # versions: keeps tag versions (Strata::Dependencies) apart from its entries, by tag id
    #           (#get_versions, #peek_versions, #set_version, #add_version, #delete_versions).
    #           Without it, Dependencies keeps them as entries, under reserved keys of its own
    #           that the tier stores like any other.
    CAPABILITIES = {leases: false, stale: false, cas: false, counters: false, host: false, tombstones: false,
                    write_tokens: false, listing: false, sweeping: false, invalidation_log: false,
                    polled_copies: false, stamp_check: false, gutter: false, versions: false}.freeze

    # Optional. Which of CAPABILITIES this tier has.
    def capabilities
      CAPABILITIES
    end

    # Required. The bytes stored under key, or nil.
    def get(key)
      raise NotImplementedError, "#{self.class} must implement get"
    end

    # Optional. A Hash of key => bytes for the keys found.
    def get_multi(keys)
      keys.each_with_object({}) do |key, found|
        bytes = get(key)
        found[key] = bytes if bytes
      end
    end

    # Optional. #get for the stack's probe of the host tier (Stack#get_host), where a tier that
    # holds tag versions (Strata::Dependencies keeps them in the stack's tiers) may check a
    # stamped entry (Entry.stamped?) in the same call: its bytes when the tier found every stamp
    # current, false when it did not (stale, or not settled there: the stack then reads and
    # checks it as any read does). Other bytes, and nil, as #get. Counted as #probe counts (a
    # hit only). By default, false for every stamped entry.
    def get_current(key)
      bytes = probe(key)
      (bytes && Entry.stamped?(bytes)) ? false : bytes
    end

    # Optional. #get_current for a reader that takes an entry holding a bare String
    # (Entry.plain_string) as its value (Stack#get_host_plain): that value String when such an
    # entry is current; [bytes] for any other bytes #get_current would return; false and nil as
    # #get_current gives them. Counted as #get_current counts. By default, #get_current's bytes
    # wrapped.
    def get_current_plain(key)
      bytes = get_current(key)
      bytes ? [bytes] : bytes
    end

    # Optional. #get_multi for the stack's read of the host tier for a reader that takes an entry
    # holding a bare String (Entry.plain_string) as its value, and names its keys
    # (Stack#get_multi_plain): each name's key is prefix + name (the bytes of both), made only
    # for a name that is a plain non-empty String with prefix + name at most max_key_bytes.
    # [values, held, rest]: values {name => value String} of such entries, current (a tier that
    # holds tag versions checks their stamps in the same call); held {name => bytes} for the
    # other entries found, except a stamped one not found current; rest, the names in neither
    # (not found, not current, or no key made). Counts only values and held, as hits: the stack
    # reads the rest again. By default, nothing found: every name is in rest.
    def get_plain_named(names, _prefix, _max_key_bytes)
      [{}, {}, names.to_a]
    end

    # Optional. #get for the stack's read-back of its own write (Copies#settle): a tier that keeps
    # hit and miss counts leaves them alone, so that they count the app's reads only.
    def peek(key)
      get(key)
    end

    # Optional. #get for the stack's probe of the host tier before a read that, on a miss, reads
    # key again (Stack#get_host): a tier that keeps hit and miss counts counts a hit only, so
    # that a miss is counted once, by the read that follows.
    def probe(key)
      get(key)
    end

    # Optional. #get_multi for the stack's read-back of its own writes (Copies#settle_multi),
    # uncounted like #peek.
    def peek_multi(keys)
      get_multi(keys)
    end

    # Optional. Stores each key => bytes; a Hash of key => true when stored. A value the tier
    # can't hold is false, with the key's old copy gone, and the call then raises
    # Strata::PartialError (caused by the ValueTooLargeError) holding the results; the other
    # entries are stored all the same.
    def set_multi(entries, ttl: nil)
      too_large = nil
      stored = entries.each_with_object({}) do |(key, bytes), results|
        results[key] = set(key, bytes, ttl: ttl)
      rescue ValueTooLargeError => error
        too_large ||= error
        delete(key)
        results[key] = false
      end
      return stored unless too_large

      raise PartialError.new(too_large.message, result: stored), cause: too_large
    end

    # Optional. Removes keys; a Hash of key => true if it was there.
    def delete_multi(keys)
      keys.each_with_object({}) { |key, deleted| deleted[key] = delete(key) }
    end

    # Required. Store bytes under key. True if stored.
    def set(key, bytes, ttl: nil)
      raise NotImplementedError, "#{self.class} must implement set"
    end

    # With write_tokens: whether key still holds the write that answered token.
    def holds?(key, token)
      raise NotImplementedError, "#{self.class} declares no write_tokens"
    end

    # With write_tokens: {key => its current token} for the keys present, to compare with those
    # their writes answered.
    def write_tokens(keys)
      raise NotImplementedError, "#{self.class} declares no write_tokens"
    end

    # Required. Store only if key is absent. True if stored.
    def add(key, bytes, ttl: nil)
      raise NotImplementedError, "#{self.class} must implement add"
    end

    # Optional (capability :cas). [bytes, token] or nil.
    def get_with_cas(key)
      raise NotImplementedError, "#{self.class} has no cas"
    end

    # Optional (capability :cas). Store only if key still holds the entry token was read with.
    def cas(key, bytes, token, ttl: nil)
      raise NotImplementedError, "#{self.class} has no cas"
    end

    # Stores bytes under key only if key still holds expected (bytes a read of this tier
    # returned), in one atomic step: true when stored. A tier with cas does it with
    # get_with_cas and cas; the SQL tier with one conditional UPDATE. For a value computed from
    # a stale one (StrataStore's stale_while_revalidate): a write or delete since wins.
    def replace(key, expected, bytes, ttl: nil)
      raise NotImplementedError, "#{self.class} has no replace" unless capabilities[:cas]

      held, token = get_with_cas(key)
      (held == expected && cas(key, bytes, token, ttl: ttl)) ? true : false
    end

    # Required. Remove key. True if something was removed.
    def delete(key)
      raise NotImplementedError, "#{self.class} must implement delete"
    end

    # Optional (capability :host). Takes the host's fill lock of key for ttl seconds: a token
    # for #unlock_fill when this caller took it, false when another caller holds it, nil when
    # there is no lock to be had for key (the caller fills without one).
    def lock_fill(key, ttl)
      raise NotImplementedError, "#{self.class} has no fill locks"
    end

    # Optional (capability :host). Gives back the fill lock of key that #lock_fill took as
    # token. True when it was still held, false when it had lapsed.
    def unlock_fill(key, token)
      raise NotImplementedError, "#{self.class} has no fill locks"
    end

    # Optional (capability :leases). Reads key for read-through: an object answering value (the
    # bytes to serve, or nil), cas (the token for #lease_fill), won?, stale? and lease_sent?. On a
    # miss the first caller wins the right to fill; the others see lease_sent?.
    def lease_get(key, lease_ttl:)
      raise NotImplementedError, "#{self.class} has no leases"
    end

    # Optional (capability :leases). Stores a won lease's fill. True only when stored fresh; false
    # when key changed or was invalidated since the lease (the fill is then dropped).
    def lease_fill(key, bytes, cas, ttl: nil)
      raise NotImplementedError, "#{self.class} has no leases"
    end

    # Optional (capability :tombstones). Reads key for a read-through fill: [bytes, nil] when it is
    # there, else [nil, token], token naming what the read found in its place.
    def get_for_fill(key)
      raise NotImplementedError, "#{self.class} has no tombstones"
    end

    # The fill methods of a tier without tombstones, which every tier has unless it overrides
    # them. With capability :tombstones, add_for_fill's token is what #get_for_fill gave (nil:
    # unknown, the read failed), key must also not have been deleted since that read, and
    # retract_fill removes the bytes only while key still holds them. With capability :host, the
    # token is the fill's #lock_fill token (nil: it holds none), which a tier may use as its
    # fence (SharedMemory does).
    module PlainFills
      # Optional. Stores the fill of a read-through: an #add. True if stored.
      def add_for_fill(key, bytes, _token, ttl: nil)
        add(key, bytes, ttl: ttl)
      end

      # Optional. Removes what #add_for_fill stored, for a fill refused further on: a #delete.
      # True if it was there.
      def retract_fill(key, _bytes)
        delete(key)
      end
    end
    include PlainFills

    # Optional. Mark key stale; a tier without capability :stale deletes it.
    def invalidate(key)
      delete(key)
    end

    # Optional (capability :counters). The new value, or nil if key is absent and no initial is given.
    # Counters are stored as ASCII decimal bytes, as memcached stores them.
    def incr(key, amount = 1, ttl: nil, initial: nil)
      raise NotImplementedError, "#{self.class} has no counters"
    end

    # Optional (capability :counters). Like incr; never goes below zero.
    def decr(key, amount = 1, ttl: nil, initial: nil)
      raise NotImplementedError, "#{self.class} has no counters"
    end

    # Optional (capability :stamp_check). The bytes before a tag id's 16 lowercase hex digits in
    # the keys the tier's stamp checks read versions under; Dependencies gives its own.
    def version_key_prefix=(prefix)
      raise NotImplementedError, "#{self.class} checks no stamps"
    end

    # Optional (capability :versions). {id => bytes} of the tag versions held for ids (tag
    # ids: Integers below 2**62; a version: 8 bytes), hits and misses counted.
    def get_versions(ids)
      raise NotImplementedError, "#{self.class} keeps no versions apart"
    end

    # Optional (capability :versions). #get_versions, uncounted.
    def peek_versions(ids)
      raise NotImplementedError, "#{self.class} keeps no versions apart"
    end

    # Optional (capability :versions). Stores tag id's version. True if stored.
    def set_version(id, bytes)
      raise NotImplementedError, "#{self.class} keeps no versions apart"
    end

    # Optional (capability :versions). Stores tag id's version unless it has one. True if stored.
    def add_version(id, bytes)
      raise NotImplementedError, "#{self.class} keeps no versions apart"
    end

    # Optional (capability :versions). Removes the versions of tag ids: true if every one was
    # there.
    def delete_versions(ids)
      raise NotImplementedError, "#{self.class} keeps no versions apart"
    end

    # Required. Remove everything.
    def clear
      raise NotImplementedError, "#{self.class} must implement clear"
    end

    # Optional. A Hash of counters about this tier.
    def stats
      {}
    end

    # Optional. The row of the host's counters (Strata::Counters::TIERS: "memcached", "sql") this
    # tier's figures go in, or nil when the stack keeps none for it (the L1 table counts its own,
    # in C). A tier with a row counts its reads, writes and deletes of cache keys through the
    # Strata::Counters::Row the stack gives #count_in; the stack counts its failures there.
    def counter_row
      nil
    end

    # Optional (with #counter_row). Counts through row (a Strata::Counters::Row) from now on.
    def count_in(row)
    end

    # Optional. Release files and connections.
    def close
    end
  end
end
