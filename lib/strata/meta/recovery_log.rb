# frozen_string_literal: true

module Strata
  module Meta
    # What this process owes each memcached server before it may use the server again: the keys
    # it changed (wrote, deleted, counted) while it could not tell the server, so that the
    # server's copies of them may be older than what the app last wrote, or deleted since
    # (no fault may lose a delete: docs/architecture.md, "Invariants"). Client notes a key when its change was
    # routed to a gutter because its server was marked down, was refused because no server was
    # up, or failed on the server without an answer (a timeout: a stopped server still carries
    # out the request it has buffered once it runs again). Client deletes the noted keys on the
    # server, and their gutter copies, before its next exchange with the server.
    #
    # Bounded: at most limit keys per server. A note past that overflows the server's log: its
    # keys are forgotten, since deleting some of them would prove nothing, and #overflow says
    # what the client does instead (recovery_overflow in Client::DEFAULTS).
    #
    # Per process: another process (or host) that did not see the outage has nothing noted and
    # may read the server's old copies. The log lives in memory and is lost with the process.
    #
    # Concurrency: not thread-safe; Client calls it under its own lock.
    class RecoveryLog
      # servers: the ring's server names. limit: keys at most per server. overflow: what an
      # overflowed server's recovery does (:stay_down or :flush), as #overflow returns it.
      def initialize(servers, limit:, overflow:)
        @limit = limit
        @overflow_action = overflow
        @keys = servers.to_h { |server| [server, {}] }.freeze
        @overflows = {}
      end

      # Notes key as changed while server could not be told; gutter: the server that took the
      # change instead, or nil. Each note is a new entry (#done forgets only the entries it was
      # given), so a key noted again during a recovery stays for the next one.
      def note(server, key, gutter)
        return if @overflows.key?(server)

        keys = @keys.fetch(server)
        if keys.size >= @limit && !keys.key?(key)
          keys.clear
          @overflows[server] = @overflow_action
        else
          keys[key] = [gutter || keys[key]&.first] # a new entry; a known gutter copy is kept
        end
        nil
      end

      # True when server's next use must first recover it: keys are noted, or it overflowed and
      # is not held down yet (#hold).
      def pending?(server)
        !@keys.fetch(server).empty? || (@overflows.key?(server) && @overflows[server] != :held)
      end

      # True when some server is pending.
      def any?
        @keys.each_key.any? { |server| pending?(server) }
      end

      # nil, or what server's recovery must do since its log overflowed: :stay_down (keep it
      # down), :flush (flush_all it), or :held (it is kept down already).
      def overflow(server)
        @overflows[server]
      end

      # server overflowed and is kept down until an operator flushes it (#flush): nothing more is
      # noted for it, and it is no longer pending.
      def hold(server)
        @overflows[server] = :held
        nil
      end

      # An operator's remedy for a server kept down (see Client#flush_server): its next recovery
      # flushes it.
      def flush(server)
        @keys.fetch(server).clear
        @overflows[server] = :flush
        nil
      end

      # A copy of server's noted keys: {key => entry}, each entry [gutter or nil].
      def take(server)
        @keys.fetch(server).dup
      end

      # Forgets the entries of taken (from #take) still in server's log, and its overflow when the
      # recovery flushed it: the recovery carried them out. Keys noted since stay.
      def done(server, taken, flushed: false)
        keys = @keys.fetch(server)
        taken.each { |key, entry| keys.delete(key) if keys[key].equal?(entry) }
        @overflows.delete(server) if flushed
        nil
      end

      # {server => keys noted, or :overflowed} for the pending servers.
      def sizes
        @keys.each_with_object({}) do |(server, keys), sizes|
          if @overflows.key?(server) then sizes[server] = :overflowed
          elsif !keys.empty? then sizes[server] = keys.size
          end
        end
      end
    end
  end
end
