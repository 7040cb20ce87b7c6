# frozen_string_literal: true

require "strata/entry"

module Strata
  # One caller's read-through of one key (docs/architecture.md, "The way a fetch goes"): the
  # object the caller reads key through, writes what it computed through, and ends. (The fill is
  # what it writes: the computed value, committed under the host lock, lease or tombstone it took.) Made by Stack#read_through, which with a
  # block also ends it; without one the caller must call #finish (ensure).
  #
  #   stack.read_through(key) do |through|
  #     through.get || compute.tap { |bytes| through.set(bytes, ttl: 60) }
  #   end
  #
  # The first #get reads the tiers with single-flight (the stack's SingleFlight, which fills in
  # the lock, lease and tombstone fields below as it goes); later ones give the same answer,
  # unread, until the caller itself writes or deletes key (#set, #add, #delete: Rails putting a
  # stale entry back under race_condition_ttl), after which they read the tiers as they are. #set
  # of a value the read-through found nowhere, or under a lease, is the fill; any other #set is
  # a plain Stack#set. Without single-flight (fill_wait 0) every call is the stack's plain one.
  #
  # Used by one thread at a time, for one key.
  class ReadThrough
    # The Stack that made it, and the key it reads through.
    attr_reader :owner, :key
    # The host tier's fill lock token (Tier#lock_fill), while this caller holds the host
    # single-flight.
    attr_accessor :host_lock
    # Index of the tier whose cluster lease this caller won, and the lease's cas token.
    attr_accessor :lease_index, :lease_cas
    # True once the leased tier took the fill (or the lease was given back).
    attr_accessor :lease_done
    # True when the value found was stale (served while another caller refills): not copied up.
    attr_accessor :stale
    # Seconds the read waited on another caller's host lock or lease, or nil when it did not wait.
    attr_accessor :waited
    # True when the caller was served an entry Rails' fetch had put back for race_condition_ttl
    # (Entry.put_back?; the store notes it, for its cache_fetch_hit event).
    attr_accessor :put_back_served
    # True when this caller computes without the lease another caller holds (it waited too long):
    # its value goes back to its own caller only, never into a tier.
    attr_accessor :unleased
    # The stale entry bytes this caller's write replaces (stale_while_revalidate: it won the
    # claim to recompute them): #set is then Stack#replace, which a write or delete since wins.
    attr_accessor :replacing
    # True when this caller is served the stale entry it read while another revalidates it.
    attr_accessor :serve_stale
    # True once #set replaced the stale entry (Stack#replace took it).
    attr_reader :replaced
    # True when the entry read was soft-stale (Entry.soft_stale?: a soft invalidation's).
    attr_accessor :soft_stale
    # True when the caller read the host tier for key just before (Stack#get_host): the
    # read-through goes straight to the host single-flight, which reads it again under the lock.
    attr_reader :host_read

    # owner: the Stack; flight: its SingleFlight, or nil when single-flight is off.
    def initialize(owner, flight, key, host_read = false)
      @owner = owner
      @flight = flight
      @key = key
      @host_read = host_read
      @host_lock = nil
      @lease_index = nil
      @lease_cas = nil
      @lease_done = false
      @stale = false
      @waited = nil
      @put_back_served = false
      @unleased = false
      @replacing = nil
      @serve_stale = false
      @replaced = false
      @soft_stale = false
      @read = false
      @found = nil
      @rewritten = false
      @tombstones = nil
    end

    # The entry bytes under key, or nil: this caller should compute the value and #set it. When
    # info (a Hash, e.g. an instrumentation payload) is given, info[:tier] names the tier that
    # answered, info[:failed_tiers] the tiers that raised, info[:stale] is set when the value
    # is a stale one served while another caller refills, and info[:waited] to the seconds the
    # read waited on another caller's host lock or lease, when it waited.
    def get(info = nil)
      return @owner.get(@key, info) if @rewritten
      return @found = @owner.get(@key, info) if @flight.nil? # no single-flight: every read reads
      return @found if @read

      @found = @flight.read(self, info)
      @read = true
      @found
    end

    # The bytes the read found (the last read, without single-flight), or nil.
    attr_reader :found

    # The stamps (Entry.stamp_words) of the entry the read found (the last read, without
    # single-flight), current then, or nil:
    # what a rewrite of that entry (the fetch putting it back for race_condition_ttl) carries,
    # rather than the versions current when it is written, which may postdate the read.
    def read_stamps
      (@found && Entry.stamped?(@found)) ? Entry.stamp_words(@found) : nil
    end

    # Stores bytes under key: the fill (SingleFlight#write; false when it was dropped) when the
    # read-through found nothing or holds a lease (or lost one), else Stack#set.
    def set(bytes, ttl: nil)
      @rewritten = true
      return @replaced = @owner.replace(@key, @replacing, bytes, ttl: ttl) if @replacing
      return @flight.write(self, bytes, ttl) if lease_pending? || @unleased || missed?

      @owner.set(@key, bytes, ttl: ttl)
    end

    # Stack#add of key, by this caller during its read-through.
    def add(bytes, ttl: nil)
      @rewritten = true
      @owner.add(@key, bytes, ttl: ttl)
    end

    # Stack#delete of key, by this caller during its read-through.
    def delete
      @rewritten = true
      @owner.delete(@key)
    end

    # Ends the read-through: gives back the host lock and an unused lease. Safe to call again.
    def finish
      @flight&.finish(self)
      nil
    end

    # Whether this caller holds a won lease that is not yet filled.
    def lease_pending?
      !@lease_index.nil? && !@lease_done
    end

    # Notes the token Tier#get_for_fill gave where the tier at index had no value; the fill is
    # stored there with it (Tier#add_for_fill).
    def read_tombstone(index, token)
      (@tombstones ||= {})[index] = token
    end

    # The token read at index, or nil (not read, or the read failed).
    def tombstone(index)
      @tombstones && @tombstones[index]
    end

    # Whether the read-through found no value in any tier: what this caller writes is computed.
    def missed?
      @read && @found.nil?
    end
  end
end
