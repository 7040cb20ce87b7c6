# frozen_string_literal: true

require "fileutils"
require "strata/counters"
require "strata/entry"
require "strata/errors"
require "strata/tier"
require "strata/strata_ext"

module Strata
  module Tiers
    # L1: a hash table in one memory-mapped file shared by every process of the app on this host
    # (the C contract is ext/strata/table.h).
    #
    # When to use it: as the first tier, for entries read far more often than written, by many
    # worker processes on one machine. A hit costs one C call and no syscall or lock.
    #
    # Thread and process safety: any thread of any process may call any method. Reads take no
    # lock; a write locks one shard (of +shards+) for a few microseconds and gives up after
    # +lock_timeout+ seconds (set/add/cas then return false; incr and decr raise
    # Strata::RetryableError). A write that gives up leaves its key reading as a miss in every
    # process, never as the value it failed to replace; so delete and clear still succeed.
    # A forked child keeps using the table; its #stats start at zero. #counters are the host's:
    # each process adds to its own slot in the file (claimed at its first count, kept when it
    # exits), and every process reads their sum; the L1 figures are counted here, in C (reads,
    # writes and deletes of cache keys, evictions), the others by the store and its stack.
    #
    # Sizing: +size+ bytes are reserved at creation (in /dev/shm by default; containers often
    # give /dev/shm only 64 MiB). About 88% holds items; each entry costs 24 bytes of header
    # plus its key and value rounded up to 8, and about 9 bytes of index. A full table evicts
    # the least recently read entries segment by segment; it never refuses a write that fits
    # #max_value_size.
    #
    # The file: its directory must belong to this uid, be writable by nobody else and not be a
    # symlink (default_path's is made 0700), and the file must be this uid's, 0600 and have one
    # link; anything else raises Strata::UnsafeFileError and is left alone. A table that fails
    # validation is rebuilt with a warning; a non-empty file that is not a table raises
    # Strata::TierError naming it and is never overwritten. Opening a valid table never waits for
    # another process; opening one still being built waits up to 1 s for its builder.
    #
    # Large values (4 KiB and up) that this process has read are kept in a per-process memo of
    # +memo_size+ bytes. A hit on such a value checks the table's current version of the item
    # and, when it is the one memoized, returns a String sharing the memo's buffer instead of
    # copying (and allocating) the value again. The table stays the truth: a write, delete,
    # expiry or eviction by any process shows on the next read. memo_size bounds the memory the
    # memo costs, values Ruby's garbage collector has yet to free included: an entry not hit
    # before the second collection after it was read goes while still young, one that is hit
    # stays while it is hit between collections, and the bytes of a long-kept entry that was
    # dropped stay charged until a major collection (ext/strata/value_memo.h). stats reports
    # memo_entries, memo_bytes and memo_old_dropped_bytes.
    #
    # A table replaced under a handle (another process opened the path with another size, or
    # found the file damaged, and rebuilt it) is noticed at the handle's next call, which opens
    # the new file with that file's geometry and works there; a read, write or delete that ran
    # on the old file meanwhile is done again on the new one (ext/strata/table.h, Caveats:
    # rebuild). stats reports reopens, the times this handle did so.
    #
    # check_stamps(bytes) checks a tagged entry's dependency stamps against the tag versions this
    # table holds (Strata::Dependencies keeps them here under its version keys), in one call that
    # makes no object: true when every one is current, false when the table holds a different
    # version for one, nil when some version is not here or not well-formed (the caller then asks
    # the tiers below). Dependencies#current? calls it when this table is the top tier
    # (ext/strata/stamp_check.h). get_current(key) is get with that check made in the same call
    # on a stamped entry (Strata::Tier#get_current; the stack's probe of the host table, which
    # a tagged fetch hit takes): its bytes when current, false when stale or not settled here.
    #
    # set, add and cas take the value as a String or as a Strata::Entry::Split, whose head and
    # payload are copied into the item one after the other: one copy of a large value, where
    # joining them first would take two and a fresh allocation.
    #
    # segment_starts is {now_ms:, shards: [[start_ms, ...], ...]}: per shard, when each segment
    # in use began to be written (unix ms; nil = unknown), each no later than now_ms
    # (strata_segments_get in ext/strata/table.h; `strata stats` shows them as ages).
    #
    # lock_fill(key, ttl) and unlock_fill(key, token) are Strata::Tier's, on a region of the file
    # of their own (ext/strata/fill_locks.h): a compare-and-swap each, nothing written to the
    # table's log. A key whose lock word another key's fill holds gets nil (no lock), counted in
    # stats as fill_lock_collisions. add_for_fill(key, bytes, token, ttl:) takes the lock's token
    # as its fence: a set or delete of the key while the lock is held marks it, and the fill's add
    # is then refused (a delete during another process's fill is not undone by it).
    #
    # get, peek, probe, get_current, get_multi, get_with_cas, set, add, add_for_fill, cas, delete, lock_fill,
    # unlock_fill, incr, decr, check_stamps, keys, cleanup, clear, stats, segment_starts, _count, _operation,
    # _counter_totals, max_value_size, size, close and closed? are implemented in C
    # (ext/strata/shared_memory_ext.c).
    class SharedMemory
      include Strata::Tier

      CAPABILITIES = Tier::CAPABILITIES.merge(cas: true, counters: true, host: true, listing: true, sweeping: true,
        polled_copies: true, stamp_check: true).freeze

      DEFAULTS = {
        shards: nil,        # power of two, 1..256; nil: 16, fewer for small sizes
        segment_size: nil,  # bytes per eviction unit, multiple of 4096; nil: size/(shards*16), 64 KiB..4 MiB
        slots: nil,         # index slots; nil: at least one per 96 data bytes
        lock_timeout: 0.05, # seconds a writer waits for a shard lock; MIN_LOCK_TIMEOUT..60
        memo_size: 8 << 20, # bytes of memory for large values this process keeps to serve repeat hits without a copy; 0: off
        logger: nil         # receives #warn when a bad file is rebuilt; nil: Kernel#warn
      }.freeze

      MIN_SIZE = 1 << 20

      # Seconds. A writer that gives up on a shard lock makes its key a miss (a fence), which is
      # for a holder that is stuck; under 10 ms a writer would give up on ordinary contention
      # and wipe keys (table.h: STRATA_MIN_LOCK_TIMEOUT_NS). So 0 is refused, not "try once".
      MIN_LOCK_TIMEOUT = 0.01

      # The name of a store's table when its l1: gives no path: the app (app:, else the Rails
      # application's module, downcased), its environment (env:, else Rails.env, else RAILS_ENV
      # or RACK_ENV) and the store's namespace (when a String or Symbol), joined with "-"; "app"
      # when there is none of them. So two apps, or development and production of one app, of
      # one user on one host share no table. Characters other than letters, digits, "_" and "."
      # become "_".
      def self.default_name(namespace = nil, app: nil, env: nil)
        rails = defined?(::Rails) ? ::Rails : nil
        app ||= rails.application.class.name.to_s.split("::").first&.downcase if rails.respond_to?(:application) && rails.application
        env ||= rails.respond_to?(:env) ? rails.env.to_s : (ENV["RAILS_ENV"] || ENV["RACK_ENV"])
        parts = [app, env]
        parts << namespace.to_s if namespace.is_a?(String) || namespace.is_a?(Symbol)
        parts = parts.map(&:to_s).reject(&:empty?)
        parts.empty? ? "app" : parts.join("-").gsub(/[^A-Za-z0-9_.-]/, "_")
      end

      # The conventional table path for app: per-user, on tmpfs. $XDG_RUNTIME_DIR counts only when
      # it is an absolute path (the XDG spec says to ignore anything else); an empty one would
      # otherwise put the table under "/".
      def self.default_path(app = "app")
        runtime = ENV["XDG_RUNTIME_DIR"]
        base = runtime&.start_with?("/") ? runtime : "/dev/shm"
        File.join(base, "strata-#{Process.uid}", "#{app}.l1")
      end

      attr_reader :path

      def initialize(path:, size:, shards: DEFAULTS[:shards], segment_size: DEFAULTS[:segment_size],
        slots: DEFAULTS[:slots], lock_timeout: DEFAULTS[:lock_timeout], memo_size: DEFAULTS[:memo_size],
        logger: DEFAULTS[:logger])
        validate_options(size, shards, segment_size, slots, lock_timeout)
        raise ArgumentError, "memo_size must be an Integer >= 0" unless memo_size.is_a?(Integer) && memo_size >= 0
        @path = File.expand_path(path.to_s)
        @logger = logger
        FileUtils.mkdir_p(File.dirname(@path), mode: 0o700)
        reason = _open(@path, size, shards || 0, segment_size || 0, slots || 0, lock_timeout.to_f)
        warn_rebuilt(reason) if reason
        self._memo_size = memo_size
      end

      def capabilities
        CAPABILITIES
      end

      # The host's counters: every process's figures in this table's file summed
      # (Strata::Counters#totals; ext/strata/counters.h). Reading them claims no slot.
      def counters
        Counters.new(self).totals
      end

      def inspect
        "#<#{self.class} path=#{@path.inspect}#{" closed" if closed?}>"
      end

      private

      def validate_options(size, shards, segment_size, slots, lock_timeout)
        raise ArgumentError, "size must be an Integer" unless size.is_a?(Integer)
        raise ArgumentError, "size must be >= 1 MiB" if size < MIN_SIZE
        raise ArgumentError, "shards must be a power of two between 1 and 256" unless shards.nil? || valid_shards?(shards)
        unless segment_size.nil? || valid_segment_size?(segment_size)
          raise ArgumentError, "segment_size must be a multiple of 4096 between 4 KiB and 64 MiB"
        end
        raise ArgumentError, "slots must be a positive Integer" unless slots.nil? || valid_slots?(slots)
        unless lock_timeout.is_a?(Numeric) && lock_timeout.between?(MIN_LOCK_TIMEOUT, 60)
          raise ArgumentError, "lock_timeout must be between #{MIN_LOCK_TIMEOUT} and 60 seconds " \
            "(a writer that gives up makes its key a miss; a shorter wait would under ordinary contention)"
        end
      end

      def valid_shards?(shards)
        shards.is_a?(Integer) && shards.between?(1, 256) && (shards & (shards - 1)).zero?
      end

      def valid_slots?(slots)
        slots.is_a?(Integer) && slots.positive?
      end

      def valid_segment_size?(segment_size)
        segment_size.is_a?(Integer) && segment_size.between?(4096, 64 << 20) && (segment_size % 4096).zero?
      end

      def warn_rebuilt(reason)
        message = "Strata L1: rebuilt #{@path}: #{reason}"
        @logger ? @logger.warn(message) : Kernel.warn(message)
      end
    end
  end
end
