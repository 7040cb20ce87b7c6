# frozen_string_literal: true

require "strata/counters"
require "strata/errors"
require "strata/tier"
require "strata/meta"

module Strata
  module Tiers
    # L2: memcached over the meta protocol (docs/architecture.md), on top of Strata::Meta::Client.
    #
    # When to use it: as the shared tier between the per-host table and the durable store, for
    # entries every host reads. It has cluster-wide fill leases and stale-while-refill, so the
    # stack uses #lease_get and #lease_fill for read-through and #invalidate for deletes.
    #
    # Thread and process safety: any thread may call any method (the client pools connections per
    # server); a forked child may keep using the same tier, it opens its own connections.
    #
    # Failure: a server that cannot be reached or answer in time raises Strata::TierError; one
    # whose connection is refused or reset, or that timed out down_after times in a row (2), is
    # skipped for retry_after seconds (its keys go to a gutter server with a short TTL). A value
    # over the server's item size limit (1 MiB by default) raises Strata::ValueTooLargeError.
    # The multi-key operations raise Strata::PartialError, carrying what the healthy servers
    # answered, when some servers fail. Each TierError names its server (#server); #stats counts
    # errors per server and gives since when a server is down (down_since).
    #
    # Outages lose no delete: keys written, deleted or counted while their server could not be
    # told are deleted on it before this process uses it again, so they read as a miss, never as
    # the copy from before the outage; a delete that reached only the gutter raises TierError
    # naming the server. A counter changed during an outage starts again in the gutter and again
    # at recovery. See "Outages" in Strata::Meta::Client, and #flush_server.
    #
    # Time bound: a call waits at most pool_timeout + connect_timeout + timeout per server it
    # touches (0.5 s each by default: 1.5 s), not timeout alone; see Strata::Meta::Client.
    #
    # Sizing: memcached's own (-m and -I on each server); the client holds pool_size connections
    # per server per process.
    #
    # TTLs are seconds, Float allowed (rounded up to whole seconds; infinite: no expiry); TTLs over
    # 30 days are sent as absolute unix times, as memcached requires, and one ending after
    # 2038-01-19 (memcached's last) is held until then. #clear flushes every server that is up
    # (flush_all): every key of every user of those servers goes, not just this app's.
    class Memcached
      include Strata::Tier

      CAPABILITIES = Tier::CAPABILITIES.merge(leases: true, stale: true, cas: true, counters: true,
        write_tokens: true, gutter: true).freeze

      # What a tier counts through until the stack gives it a row (#count_in): nothing.
      NOT_COUNTED = Counters::Row::NONE

      DEFAULTS = {
        # Seconds an invalidated entry may still be served stale while one caller refills it.
        grace_ttl: 30
      }.freeze

      attr_reader :client

      # servers: "host:port[:weight]" strings. options: grace_ttl (see DEFAULTS) and the client's
      # (Strata::Meta::Client::DEFAULTS).
      def initialize(servers:, **options)
        own = DEFAULTS.merge(options.slice(*DEFAULTS.keys))
        @grace_ttl = own.fetch(:grace_ttl)
        @client = Meta::Client.new(servers: servers, **options.except(*DEFAULTS.keys))
        @counts = NOT_COUNTED
      end

      def capabilities
        CAPABILITIES
      end

      def counter_row
        "memcached"
      end

      # The client counts its gutter traffic and recoveries there too.
      def count_in(row)
        @counts = row
        @client.counts = row
      end

      def get(key)
        @counts.read(key, @client.get(key))
      end

      def get_multi(keys)
        @counts.read_many(keys, @client.get_multi(keys))
      end

      def set_multi(entries, ttl: nil, tokens: false)
        @counts.wrote_many(@client.set_multi(entries, ttl: ttl, tokens: tokens))
      end

      def delete_multi(keys)
        @counts.deleted_many(@client.delete_multi(keys))
      end

      def get_with_cas(key)
        @client.get_with_cas(key)
      end

      def set(key, bytes, ttl: nil, token: false)
        @counts.wrote(key, @client.set(key, bytes, ttl: ttl, token: token))
      end

      # Write tokens (Strata::Tier#holds?): an item's CAS. A set with token: true gives the item
      # a random one where the server has E (ServerFeatures#explicit_cas) and answers it, so the
      # stack's read-back of its own write asks for the CAS and not the value.
      def holds?(key, token)
        @client.cas_of(key) == token
      end

      def write_tokens(keys)
        @client.cas_multi(keys)
      end

      def add(key, bytes, ttl: nil)
        @counts.wrote(key, @client.add(key, bytes, ttl: ttl))
      end

      def cas(key, bytes, token, ttl: nil)
        @counts.wrote(key, @client.cas(key, bytes, token, ttl: ttl))
      end

      # Whether key's own server is down in this process: a read of key is then a gutter's
      # copy, not its server's (Strata::Poller asks).
      def gutter?(key)
        ring = @client.ring
        !ring.up?(ring.server_for(key))
      end

      def delete(key)
        @counts.deleted(key, @client.delete(key))
      end

      # Marks key stale for grace_ttl seconds (the tier's default when nil); see Meta::Client.
      def invalidate(key, grace_ttl: nil)
        @counts.deleted(key, @client.invalidate(key, grace_ttl: grace_ttl || @grace_ttl))
      end

      def incr(key, amount = 1, ttl: nil, initial: nil)
        @client.incr(key, amount, ttl: ttl, initial: initial)
      end

      def decr(key, amount = 1, ttl: nil, initial: nil)
        @client.decr(key, amount, ttl: ttl, initial: initial)
      end

      # For the stack's read-through: a Meta::Client::Lease. A value (stale ones too) counts as
      # a hit, none as a miss.
      def lease_get(key, lease_ttl:)
        lease = @client.lease_get(key, lease_ttl: lease_ttl)
        @counts.read(key, lease.value)
        lease
      end

      # For the stack's read-through: stores a fill under the lease's cas (true only when it is
      # stored fresh); see Meta::Client.
      def lease_fill(key, bytes, cas, ttl: nil)
        @counts.wrote(key, @client.lease_fill(key, bytes, cas, ttl: ttl))
      end

      # flush_all on every server that is up (see the class comment).
      def clear
        @client.flush
      end

      def stats
        @client.stats
      end

      # Lets server back after its recovery log overflowed (recovery_overflow: :stay_down): this
      # process flushes it before its next use. See Strata::Meta::Client#flush_server.
      def flush_server(server)
        @client.flush_server(server)
      end

      def close
        @client.close
      end

      def inspect
        "#<#{self.class} servers=#{@client.ring.servers.join(",")}>"
      end
    end
  end
end
