# frozen_string_literal: true

require "strata/errors"

module Strata
  module Meta
    # The host's record of the memcached servers that some process of this host considers down,
    # and since when: a reserved key per server in the L1 table, which every process of the host
    # maps and `strata stats` reads (docs/operations.md, "Memcached servers"). The store makes one
    # when it has both an L1 table and memcached, and hands it to the client's Ring, which calls
    # #down and #up on an outage's transitions only (its first mark and each mark again at a
    # retry that failed; its end), never on a call to a server that is up.
    #
    # Each key, KEY_PREFIX and the server as the Ring names it ("host:port"), holds PACK: the
    # unix ms at which the process's outage of the server began (Ring's down since) and that
    # process's pid. A NUL byte first, so Stack#keys never lists it. It has no TTL.
    #
    # #down adds the key, so the earliest outage start is kept: a second process marking the same
    # server down finds it there and leaves it, unless the record names a process that is gone or
    # an outage that began later, which it replaces (by compare-and-set: a race lost is left to
    # the next mark). #up deletes it: the server answered a process of this host. Another process
    # still failing on it adds it back at its next failed retry (at most retry_after later), and
    # so does any process whose mark finds the key lost (the table evicted or cleared it).
    #
    # Never raises: whatever fails (the table closed, a shard lock not had within lock_timeout)
    # goes to on_error (the store's failure reports) as on_error.call(error, :l1), and the
    # record is left as it was until the next transition.
    class HostOutages
      KEY_PREFIX = "\x00strata:mc:down:".b.freeze
      # since (unix ms), pid: two little-endian signed 64-bit words.
      PACK = "q<q<"
      BYTES = 16

      # The reserved key of server ("host:port").
      def self.key(server)
        (KEY_PREFIX + server.to_s.b).freeze
      end

      # [since (unix ms), pid] from a record's bytes, or nil when they are not one.
      def self.decode(bytes)
        return nil unless bytes.is_a?(String) && bytes.bytesize == BYTES

        since, pid = bytes.unpack(PACK)
        (since.positive? && pid.positive?) ? [since, pid] : nil
      end

      # Whether pid names a live process (EPERM: one of another user). A pid that is not one
      # (0 or below, kill's process groups) reads as gone.
      def self.alive?(pid)
        return false unless pid.is_a?(Integer) && pid.positive? && pid <= 0x7fff_ffff

        Process.kill(0, pid)
        true
      rescue Errno::ESRCH
        false
      rescue Errno::EPERM
        true
      end

      # table: the L1 tier (Tiers::SharedMemory). on_error: called as on_error.call(error, :l1).
      def initialize(table, on_error:)
        @table = table
        @on_error = on_error
        @keys = {}
      end

      # This process considers server down since since (a Time): recorded unless the record
      # already says an outage that began no later, by a live process.
      def down(server, since)
        key = key_of(server)
        mine = [(since.to_r * 1000).floor, Process.pid]
        bytes = mine.pack(PACK)
        return if @table.add(key, bytes)

        held, token = @table.get_with_cas(key)
        return @table.add(key, bytes) if held.nil? # gone since the add: one more try

        record = HostOutages.decode(held)
        return if record && record[0] <= mine[0] && (record[1] == mine[1] || HostOutages.alive?(record[1]))

        @table.cas(key, bytes, token)
      rescue => e # the record is best effort: never raised into the app's call
        report(e)
      end

      # server answered this process again: its outage is over for the host.
      def up(server)
        @table.delete(key_of(server))
      rescue => e
        report(e)
      end

      # This process stops watching ring (its store closes): the records of the servers it
      # considers down that name this process are deleted, so that none outlives its view.
      def release(ring)
        return unless ring.watcher.equal?(self) # released already (a store closed twice)

        ring.watcher = nil
        ring.health[:down_since].each_key do |server|
          key = key_of(server)
          record = HostOutages.decode(@table.get(key))
          @table.delete(key) if record && record[1] == Process.pid
        rescue => e
          report(e)
        end
        nil
      end

      private

      def key_of(server)
        @keys[server] ||= HostOutages.key(server)
      end

      def report(error)
        @on_error&.call(error, :l1)
      rescue
        nil
      end
    end
  end
end
