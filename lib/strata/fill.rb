# frozen_string_literal: true

module Strata
  # One caller's read-through of one key (DESIGN section 4): what it holds while it may be the
  # one computing the value. The stack fills it in as the read goes down the tiers, and reads it
  # when the caller writes the computed value and when the caller is done (Stack#finish).
  #
  # Created by Stack#fill_for and used by one thread at a time, for one key.
  class Fill
    # The Stack that made it, and the key it reads through.
    attr_reader :owner, :key
    # The host tier's lock key, while this caller holds the host single-flight.
    attr_accessor :host_lock
    # Index of the tier whose cluster lease this caller won, and the lease's cas token.
    attr_accessor :lease_index, :lease_cas
    # True once the leased tier took the fill (or the lease was given back).
    attr_accessor :lease_done
    # True when the value found was stale (served while another caller refills): not copied up.
    attr_accessor :stale
    # True when this caller computes without the lease another caller holds (it waited too long):
    # its value goes back to its own caller only, never into a tier.
    attr_accessor :unleased
    # Whether the read-through has read the tiers, and what it found (bytes or nil).
    attr_accessor :read, :found
    # True once the caller itself wrote or deleted key during the read-through (as Rails does to
    # put a stale entry back under race_condition_ttl): what the read found is then out of date,
    # and the caller's later reads of key go to the tiers instead.
    attr_accessor :rewritten
    # The stamps (Entry.stamp_words) of the stamped entry the read-through found current, if any:
    # what a rewrite of that entry (Rails' race_condition_ttl) carries, rather than the versions
    # current when it is written, which may postdate the read.
    attr_accessor :read_stamps
    # True when the caller read the host tier for key just before (Stack#get_host): the
    # read-through goes straight to the host single-flight, which reads it again under the lock.
    attr_reader :host_read

    def initialize(owner, key, host_read = false)
      @owner = owner
      @key = key
      @host_read = host_read
      @host_lock = nil
      @lease_index = nil
      @lease_cas = nil
      @lease_done = false
      @stale = false
      @unleased = false
      @read = false
      @found = nil
      @rewritten = false
      @tombstones = nil
      @read_stamps = nil
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
