# frozen_string_literal: true

require "active_record"
require "digest"
require "strata/clock"
require "strata/counters"
require "strata/errors"
require "strata/entry"
require "strata/dependencies"
require "strata/transaction_tags"
require "strata/tier"
require "strata/tiers/sql/database"
require "strata/tiers/sql/dialect"
require "strata/tiers/sql/embedded"
require "strata/tiers/sql/expiry"
require "strata/tiers/sql/listener"
require "strata/tiers/sql/log_statements"
require "strata/tiers/sql/options"
require "strata/tiers/sql/raw_tags"
require "strata/tiers/sql/schema"
require "strata/tiers/sql/sizing"
require "strata/tiers/sql/statements"
require "strata/tiers/sql/versions_and_log"
require "strata/tiers/sql/writes"

module Strata
  module Tiers
    # L3: the durable tier, one table in SQLite, PostgreSQL or MySQL through Active Record
    # (docs/architecture.md), with two beside it (Schema): the tag versions and the invalidation
    # log (VersionsAndLog). Load it with `require "strata/tiers/sql"`; it is the only part of Strata
    # that loads Active Record.
    #
    # When to use it: as the bottom tier, for entries that are expensive to rebuild and worth
    # keeping across restarts and deploys, or on its own as a cache shared by every process of a
    # host (embedded) or of every host (PostgreSQL, MySQL).
    #
    # Two ways to connect; pass exactly one:
    #
    #   SQL.new(path: "tmp/cache/strata.sqlite3")
    #     Embedded: a SQLite file in WAL mode (synchronous=NORMAL) with a pool of its own, apart
    #     from the app's connections and transactions. The tier creates the file and its table.
    #
    #   SQL.new(connection_class: CacheRecord)
    #     An Active Record class whose pool reaches PostgreSQL, MySQL/MariaDB or SQLite. Make the
    #     table first with SQL.create_table!(CacheRecord) or the migration from
    #     `bin/rails generate strata:sql`.
    #     Prefer an abstract class of its own (`connects_to database: {writing: :cache}`) to
    #     ActiveRecord::Base: on the app's own pool, a cache write made inside an app transaction
    #     commits or rolls back with it. Give the database config connect_timeout and a
    #     statement_timeout, so that an unreachable server fails the call rather than hanging it.
    #
    # Keys are 1 to 250 bytes (their bytes, whatever their encoding); values are byte strings;
    # TTLs are seconds (Float allowed, nil or 0 for never, negative for already expired).
    #
    # Reads compare the full key, so two keys whose 64-bit hashes collide read as misses, never as
    # each other's value (they share one row: the later write takes it). Expired rows read as
    # misses. max_age bounds how long rows are kept, not how long they are served.
    #
    # Tombstones: a delete leaves the key's row behind for tombstone_ttl seconds as a tombstone,
    # which reads as a miss and which set and add replace like an expired row. It is there for
    # read-through fills (#get_for_fill, #add_for_fill): a fill that read the key before the
    # delete can't store what it computed from older data after it. A tombstone counts in the
    # table's entries, and its key's bytes in its byte_size, so expiry bounds them like any row.
    #
    # Expiry: every expire_every writes (counted per process), before its own write, a write runs
    # one pass (Expiry) over the oldest expiry_batch_size rows by id, which is the order of last
    # writes: it deletes those that expired or outlived max_age, and the oldest ones while the
    # table is over max_size or max_entries. A pass deletes at most one batch. With rows of even
    # size and expire_every <= expiry_batch_size, the table stays within one batch of its bounds.
    # Expired rows further back wait for their turn at the front, or for #cleanup. #stats counts
    # this process's passes and the rows they deleted; with a row of the host's counters
    # (#count_in, which a store with an L1 table gives) they are counted there too, as
    # expiry_passes, expired and evictions, for `strata stats` to show.
    #
    # Sizing: a pass with max_size or max_entries set needs the table's totals. It counts them
    # exactly while the ids span at most 20,000 or the table holds at most 2,000 rows. Past
    # that it counts the newest 2,001 rows exactly and, below them, 20 random windows of 250
    # ids, one in each twentieth of the remaining ids, scaled up (all of them when they are at
    # most 5,000; see Statements::EXACT_ROWS). So a pass reads at most about 7,000 rows on any
    # table, and the bounds hold to within that estimate. Before any of that, upper bounds (the
    # id span, and on SQLite the file size) that are within budget spare the count. byte_size is
    # key plus value bytes, without the database's per-row overhead and indexes. (See Sizing.)
    #
    # Thread and process safety: any thread of any process may call any method; each call checks
    # a connection out of the pool for its statements and returns it. A forked child opens its
    # own connections (the embedded pool and Active Record both start afresh after fork). SQLite
    # takes one writer at a time across processes; a writer on the embedded file waits up to
    # busy_timeout for the lock, sleeping in Ruby so that the process's other threads run
    # meanwhile (Embedded.wait_for_locks). On an app's SQLite connection_class the adapter's own
    # wait applies: Active Record 7.1 and 7.2 set SQLite's busy_timeout, which waits holding
    # Ruby's GVL (every thread of the process stops meanwhile), unless Strata::SQLiteBusyHandler
    # is prepended to the adapter (the Railtie does).
    #
    # Failure: any database error (refused or lost connection, lock or statement timeout, missing
    # table) raises Strata::TierError with tier :l3, Strata::RetryableError when a retry may pass
    # (a lock or statement timeout, a busy SQLite file, no free pooled connection). A value over
    # max_value_size raises Strata::ValueTooLargeError and writes nothing. A write whose expiry
    # pass fails raises before it writes. The next call reconnects (Active Record does it for an
    # app's connection_class; an embedded SQLite file needs no reconnecting).
    #
    # Capabilities: tombstones and versions (no leases, stale copies, cas or counters);
    # invalidate deletes, leaving a tombstone like #delete.
    #
    # Tag versions (docs/coherence.md; capability versions, VersionsAndLog): Strata::Dependencies
    # keeps them here by tag id, in the versions table, where max_size, max_age and TTLs never
    # reach them: #get_versions, #set_version, #add_version and #delete_versions read, upsert,
    # insert-if-absent and delete a tag's row, whose value is the 8 bytes of the version. Keys
    # are only keys: none is read as a tag. clear empties the versions too.
    #
    # The invalidation log (invalidation_log:, on by default with connection_class:, the database
    # that hosts share, and off with path:, one host's file): in the same transaction as the
    # change, set, set_multi and delete of a key append a row naming the key; set and delete of
    # a version (set_version, delete_versions) a row naming the tag; clear a row naming neither. Fills (add, add_for_fill)
    # append nothing: they store what the tier already held. On PostgreSQL the same statement
    # notifies the channel "<table_name>_log". Each host's Strata::Poller reads the rows
    # (#log_after, #log_rows) and drops its copies of what they name. The expiry pass also trims
    # rows older than log_retention seconds from the front of the log, at most one batch,
    # never the newest row.
    #
    # Raw tags (SQLite): the strata:triggers migration's SQLite triggers append changed tags as
    # text to <table_name>_raw_tags; the pollers turn them into versions and log rows
    # (#apply_raw_tags, RawTags).
    class SQL
      include Strata::Tier
      include Options
      include VersionsAndLog
      include RawTags

      CAPABILITIES = Tier::CAPABILITIES.merge(tombstones: true, listing: true, sweeping: true, versions: true).freeze
      # With the invalidation_log: option on.
      LOGGING_CAPABILITIES = CAPABILITIES.merge(invalidation_log: true).freeze
      # The token of a fill that read no row (ids start at 1).
      NO_TOMBSTONE = 0
      # What a tombstone keeps as its value when it buried a live row, so that the one statement
      # that makes it can say so (Statements#bury); a tombstone's value is never read.
      BURIED_LIVE = "\x01".b.freeze

      DEFAULTS = {
        table_name: "strata_entries",
        max_size: 256 * 1024 * 1024, # bytes (sum of byte_size); nil: unbounded
        max_entries: nil,            # rows; nil: unbounded
        max_age: nil,                # seconds since a row's last write; nil: kept until expiry or budget
        max_value_size: 1024 * 1024, # bytes of one value; memcached's item size, so L2 takes what L3 holds
        expiry_batch_size: 100,      # rows one expiry pass may delete
        expire_every: 50,            # writes per process between passes, at most expiry_batch_size
        tombstone_ttl: 60,           # seconds a deleted key's tombstone fences fills that read before it
        invalidation_log: nil,       # append to the log; nil: true with connection_class:, false with path:
        log_retention: 600,          # seconds a log row is kept for pollers that are behind
        pool: 5,                     # embedded only: connections in the SQLite pool
        busy_timeout: 1              # embedded only: seconds to wait for another writer's lock
      }.freeze

      # Creates the tier's tables (Schema) through connection_class's pool unless they exist; safe
      # to run again.
      def self.create_table!(connection_class, table_name: DEFAULTS[:table_name])
        Options.check_table_name(table_name)
        connection_class.connection_pool.with_connection { |connection| Schema.create(connection, table_name.to_s) }
        true
      end

      # The key_hash column for key: the first 8 bytes of its SHA-256 as a signed 64-bit integer,
      # the same in every process and every version of Strata.
      def self.key_hash(key)
        Digest::SHA256.digest(key).unpack1("q>")
      end

      attr_reader :table_name, :log_retention

      # See the class comment and DEFAULTS. pool and busy_timeout apply to path: only.
      def initialize(path: nil, connection_class: nil, table_name: DEFAULTS[:table_name],
        max_size: DEFAULTS[:max_size], max_entries: DEFAULTS[:max_entries], max_age: DEFAULTS[:max_age],
        max_value_size: DEFAULTS[:max_value_size], expiry_batch_size: DEFAULTS[:expiry_batch_size],
        expire_every: DEFAULTS[:expire_every], tombstone_ttl: DEFAULTS[:tombstone_ttl],
        invalidation_log: DEFAULTS[:invalidation_log], log_retention: DEFAULTS[:log_retention], pool: nil, busy_timeout: nil)
        validate_connection(path, connection_class, pool, busy_timeout)
        validate_limits(table_name, max_size, max_entries, max_age, max_value_size, expiry_batch_size, expire_every)
        validate_seconds(:tombstone_ttl, tombstone_ttl)
        validate_seconds(:log_retention, log_retention)
        validate_invalidation_log(invalidation_log)
        @logging = invalidation_log.nil? ? path.nil? : invalidation_log
        @log_retention = log_retention
        @table_name = table_name.to_s
        @max_value_size = max_value_size
        @expire_every = expire_every
        @batch = expiry_batch_size
        @tombstone_ms = (tombstone_ttl * 1000).ceil
        @expiry = Expiry.new(max_size: max_size, max_entries: max_entries, max_age: max_age)
        @limits = {max_size: max_size, max_entries: max_entries, max_age: max_age, max_value_size: max_value_size}
        @statements = nil
        @writer = nil
        @sizing = nil
        @log_statements = nil
        @raw_tag_statements = nil
        @raw_tags = false
        @raw_tags_looked = nil
        @lock = Mutex.new # guards @writes and @counters
        @writes = 0
        @counters = {hits: 0, misses: 0, sets: 0, deletes: 0, too_large: 0, expiry_passes: 0, expired: 0, evicted: 0}
        @counts = Counters::Row::NONE # the host's counters, once the stack gives a row (#count_in)
        @embedded_path = path
        @database = if path
          open_embedded(File.expand_path(path.to_s), pool || DEFAULTS[:pool], busy_timeout || DEFAULTS[:busy_timeout])
        else
          Database.new(connection_class, owned: false)
        end
      end

      # The Active Record class whose pool the tier uses (for path:, the one it made).
      def connection_class
        @database.connection_class
      end

      # Whether the tier's statements run on the app's connections (connection_class:), where
      # they join a transaction the app has open.
      def app_connections?
        @embedded_path.nil?
      end

      # The connection this thread's statements would run on when they join an open, joinable
      # transaction of the app's (connection_class: only), else nil: a change made now commits
      # or rolls back with it.
      def app_transaction
        return nil unless @embedded_path.nil?

        TransactionTags.joinable_connection(connection_class.connection_pool)
      rescue ActiveRecord::ActiveRecordError
        nil
      end

      def capabilities
        @logging ? LOGGING_CAPABILITIES : CAPABILITIES
      end

      def counter_row
        "sql"
      end

      def count_in(row)
        @counts = row
      end

      def get(key)
        bytes = peek(key)
        count(bytes ? :hits : :misses)
        @counts.read(key, bytes)
      end

      def get_multi(keys)
        return {} if keys.empty?

        found, wanted = select_many(keys)
        count(:hits, found.size)
        count(:misses, wanted - found.size)
        @counts.read_many(keys, found)
      end

      # #get without counting a hit or miss (see Tier#peek).
      def peek(key)
        check_key(key)
        rows = @database.run(:get) { |c| @database.select(c, :get, statements.get, [key_hash(key), binary(key), Entry.now]) }
        rows.empty? ? nil : rows.first.first
      end

      # #get_multi without counting hits or misses (see Tier#peek_multi).
      def peek_multi(keys)
        select_many(keys).first
      end

      # For a read-through fill: [bytes, nil] when key is live, else [nil, token] for
      # #add_for_fill, where token names the tombstone read (NO_TOMBSTONE when there was none).
      def get_for_fill(key)
        check_key(key)
        row = @database.run(:get) do |c|
          @database.select(c, :get, statements.get_for_fill, [key_hash(key), binary(key), Entry.now]).first
        end
        if row.nil? || row[1] < 0
          count(:misses)
          @counts.read(key, nil)
          return [nil, row ? row[2] : NO_TOMBSTONE]
        end
        count(:hits)
        [@counts.read(key, row.first), nil]
      end

      def set(key, bytes, ttl: nil)
        write(:set, key, bytes, ttl)
        count(:sets)
        @counts.wrote(key, true)
      end

      # Every entry in one transaction (one commit instead of one per key), with the expiry passes
      # its writes make due, as #set would run them. Every key and value is checked first, so bad
      # input writes nothing. A value over max_value_size is not written and its key's old row
      # is deleted; the rest are stored, and the call raises Strata::PartialError (caused by a
      # ValueTooLargeError) with the results. Rows are written in key_hash order, so that two
      # batches that share keys lock their rows in one order (PostgreSQL, MySQL) and can't deadlock.
      def set_multi(entries, ttl: nil)
        entries.each { |key, bytes| check_value(key, bytes) }
        expires_in = check_ttl(ttl)
        results = entries.to_h { |key, bytes| [key, bytes.bytesize <= @max_value_size] }
        return results if results.empty?

        ordered = results.keys.map { |key| [key_hash(key), key] }.sort_by(&:first)
        @database.run(:set_multi) do |c|
          now = Entry.now
          @database.transaction(c) do
            ordered.each do |hash, key|
              log(c, now, key: key) if @logging
              next writer.bury(c, hash, binary(key), tombstone(key.bytesize, now)) unless results[key]

              expire(c) if write_due?
              @database.write(c, :set_multi, statements.set, write_binds(key, entries[key], expires_in, now, hash))
            end
          end
        end
        refused = results.reject { |_, stored| stored }.keys
        count(:sets, results.size - refused.size)
        @counts.wrote_many(results)
        return results if refused.empty?

        count(:too_large, refused.size)
        error = too_large(refused.first, entries[refused.first])
        raise PartialError.new("#{refused.size} values over max_value_size, first: #{error.message}",
          result: results, tier: :l3), cause: error
      end

      def add(key, bytes, ttl: nil)
        return @counts.wrote(key, false) unless write(:add, key, bytes, ttl)

        count(:sets)
        @counts.wrote(key, true)
      end

      # Tier#replace: one UPDATE of the key's live row while it holds expected, and its log row
      # in the same transaction (with the invalidation log).
      def replace(key, expected, bytes, ttl: nil)
        check_writable(key, bytes)
        expires_in = check_ttl(ttl)
        replaced = @database.run(:set) do |c| # statements and binds read the dialect: a closed tier raises inside
          now = Entry.now
          binds = [binary(bytes), expires_at(expires_in, now), now, key.bytesize + bytes.bytesize, key_hash(key), binary(key),
            binary(expected), now]
          with_expiry(c, @logging) do
            changed = @database.changed(c, :set, statements.replace, binds) > 0
            log(c, now, key: key) if changed && @logging
            changed
          end
        end
        count(:sets) if replaced
        @counts.wrote(key, replaced)
      end

      # The fill of a read-through whose #get_for_fill gave token (nil: unknown): an add that may
      # also replace the tombstone token names, and no other. A tombstone made since the read refuses it, as
      # a live row does. False when refused.
      def add_for_fill(key, bytes, token, ttl: nil)
        return @counts.wrote(key, false) unless write(:add_for_fill, key, bytes, ttl, token || NO_TOMBSTONE)

        count(:sets)
        @counts.wrote(key, true)
      end

      # Gives back what #add_for_fill stored, when the fill was refused further on: a tombstone
      # takes its place, unless key holds something else by now (a newer write, a delete).
      # True when the fill's row was still there.
      def retract_fill(key, bytes)
        check_value(key, bytes)
        hash = key_hash(key)
        @database.run(:delete) do |c| # binary reads the dialect: a closed tier raises inside
          binds = [*tombstone(key.bytesize, Entry.now), hash, binary(key), binary(bytes)]
          @database.changed(c, :delete, statements.retract, binds) > 0
        end
      end

      # Replaces key's row with a tombstone (see the class comment), which counts as a write
      # towards the next expiry pass. True when a live row was there.
      def delete(key)
        check_key(key)
        hash = key_hash(key)
        deleted = @database.run(:delete) do |c| # binary reads the dialect: a closed tier raises inside
          stored_key = binary(key)
          now = Entry.now
          with_expiry(c, @logging) do
            log(c, now, key: key) if @logging
            writer.bury(c, hash, stored_key, tombstone(key.bytesize, now))
          end
        end
        count(:deletes)
        @counts.deleted(key, deleted)
      end

      # Empties the entries and the versions; the log gets a row saying so.
      def clear
        @database.run(:clear) do |c|
          @database.transaction(c) do
            @database.delete(c, :clear, statements.clear)
            @database.delete(c, :clear, log_statements.versions_clear)
            log(c, Entry.now) if @logging
          end
        end
        true
      end

      # Deletes every expired row, and every row older than max_age, in steps of
      # Statements::CLEANUP_STEP rows. The number deleted.
      def cleanup
        now = Entry.now
        written_before = @expiry.written_before(now) || 0 # created_at < 0 matches no row
        @database.run(:cleanup) do |c|
          last = @database.select(c, :cleanup, statements.max_id).first.first
          after = 0
          deleted = 0
          loop do # bound: the ids up to last, CLEANUP_STEP at a time
            ids = @database.transaction(c) do # see #expire: the ids read are the ids deleted
              step = @database.select(c, :cleanup, statements.expired_ids, [after, last, now, written_before]).map(&:first)
              deleted += @database.delete(c, :cleanup, statements.delete_ids(step)) unless step.empty?
              step
            end
            break if ids.empty?

            after = ids.last
          end
          deleted
        end
      end

      # The keys of the live rows, read in pages of Statements::KEYS_PAGE rows in id order (one
      # statement per page, no transaction across them: a row written meanwhile may be listed or
      # not). O(rows): for delete_matched, not for request paths.
      def keys
        listed = []
        last_id = 0
        now = Entry.now
        loop do # bound: rows / KEYS_PAGE pages
          rows = @database.run(:keys) { |c| @database.select(c, :keys, statements.live_keys, [last_id, now]) }
          rows.each { |_id, key| listed << key }
          break if rows.size < Statements::KEYS_PAGE

          last_id = rows.last.first
        end
        listed
      end

      # This process's counters (deadlock_reruns: blocks run again after the server rolled them
      # back for a deadlock, see Database#run), the bounds, and the table's entries and bytes (a
      # COUNT and SUM over the table: O(rows)).
      def stats
        entries, bytes = @database.run(:stats) { |c| @database.select(c, :stats, statements.totals).first }
        @lock.synchronize { @counters.dup }.merge(deadlock_reruns: @database.deadlock_reruns)
          .merge(@limits).merge(entries: entries, bytes: bytes)
      end

      # Embedded: disconnects and removes the tier's pool. With a connection_class the app owns
      # the pool, and close leaves it alone. Later calls raise Strata::TierError either way.
      def close
        @database.close unless @database.closed?
        nil
      end

      def closed?
        @database.closed?
      end

      def inspect
        "#<#{self.class} #{@database.description} table=#{@table_name}#{" closed" if closed?}>"
      end

      private

      # Checks key and bytes as every write does; raises Strata::ValueTooLargeError (counted)
      # for bytes over max_value_size.
      def check_writable(key, bytes)
        check_value(key, bytes)
        return if bytes.bytesize <= @max_value_size

        count(:too_large)
        raise too_large(key, bytes)
      end

      # set, add or add_for_fill (with the tombstone token) on key: whether it stored (a set
      # always does).
      def write(operation, key, bytes, ttl, token = nil)
        check_writable(key, bytes)
        expires_in = check_ttl(ttl)
        logged = @logging && operation == :set
        @database.run(operation) do |c| # statements and binds read the dialect: a closed tier raises inside
          now = Entry.now
          binds = write_binds(key, bytes, expires_in, now)
          with_expiry(c, logged) do
            log(c, now, key: key) if logged
            writer.stored?(c, operation, binds, token)
          end
        end
      end

      # The block's value, after an expiry pass first when one is due: the pass and the block's
      # write then commit together, or neither does. In one transaction also when together
      # (the write appends to the log).
      def with_expiry(c, together = false)
        due = write_due?
        return yield unless due || together

        @database.transaction(c) do
          expire(c) if due
          yield
        end
      end

      # The value, expires_at, created_at and byte_size of a tombstone made at now.
      def tombstone(key_size, now)
        [binary(""), -(now + @tombstone_ms), now, key_size]
      end

      def too_large(key, bytes)
        ValueTooLargeError.new("value for key #{key.inspect} is #{bytes.bytesize} bytes; " \
          "the SQL tier's max_value_size is #{@max_value_size}")
      end

      # Binds of the set and add statements (see Statements).
      def write_binds(key, bytes, ttl, now, hash = key_hash(key))
        [hash, binary(key), binary(bytes), expires_at(ttl, now), now, key.bytesize + bytes.bytesize]
      end

      # [{key => bytes} for the live keys among keys, the number of distinct keys asked for].
      def select_many(keys)
        return [{}, 0] if keys.empty?

        keys.each { |key| check_key(key) }
        wanted = keys.to_h { |key| [key.b, key] }
        found = {}
        @database.run(:get_multi) do |c|
          wanted.keys.each_slice(Statements::MAX_IN_LIST) do |slice| # bound: keys.size / MAX_IN_LIST statements
            select_in_list(c, slice).each do |stored_key, value|
              key = wanted[stored_key] # nil for a row whose hash collides with a wanted key's
              found[key] = value if key
            end
          end
        end
        [found, wanted.size]
      end

      # Rows [key, value] for up to Statements::MAX_IN_LIST binary keys.
      def select_in_list(c, keys)
        size = statements.in_list_size(keys.size)
        binds = keys.map { |key| key_hash(key) }
        binds.fill(binds.first, binds.size, size - binds.size) # padding repeats a hash, which IN ignores
        binds << Entry.now
        @database.select(c, :get_multi, statements.get_multi(size), binds)
      end

      # One expiry pass (see Expiry) on connection c, inside a transaction: SQLite may give a
      # deleted row's id to the next insert, and the transaction's write lock keeps other writers
      # out between reading the ids and deleting them. (PostgreSQL and InnoDB never reuse an id.)
      # The totals come first: while the table is within budget only rows that expired or
      # outlived max_age can go, and the database picks those out of the front itself instead of
      # handing the whole batch over row by row.
      def expire(c)
        now = Entry.now
        entries, bytes = @expiry.budgeted? ? sizing.totals(c) : [0, 0]
        head = if @expiry.within_budget?(entries, bytes)
          # created_at < 0 matches no row: without max_age only the TTL expires rows
          @database.select(c, :expire, statements.expired_head, [now, @expiry.written_before(now) || 0])
        else
          @database.select(c, :expire, statements.head)
        end
        victims = @expiry.victims(head, entries, bytes, now)
        @database.delete(c, :expire, statements.delete_ids(victims.ids)) unless victims.ids.empty?
        trim_log(c, now) if @logging
        @lock.synchronize do
          @counters[:expiry_passes] += 1
          @counters[:expired] += victims.expired
          @counters[:evicted] += victims.evicted
        end
        @counts.expiry_pass(victims.expired, victims.evicted) # the host's (with L1), in sql's row
      end

      def write_due?
        @lock.synchronize { ((@writes += 1) % @expire_every).zero? }
      end

      def statements
        @statements ||= Statements.new(@table_name, @database.dialect, expiry_batch_size: @batch)
      end

      def writer
        @writer ||= Writes.for(@database, statements)
      end

      def sizing
        @sizing ||= Sizing.new(@database, statements, @expiry)
      end

      def open_embedded(path, pool, busy_timeout)
        connection_class = Embedded.connection_class(path, pool: pool, busy_timeout: busy_timeout)
        sqlite_pool = Embedded.sqlite_pool(path, pool: pool, busy_timeout: busy_timeout)
        database = Database.new(connection_class, owned: true, sqlite_pool: sqlite_pool)
        create_schema(database, busy_timeout)
        database
      rescue SystemCallError => e
        raise TierError.new("Strata L3 sqlite3:#{path}: #{e.message}", tier: :l3)
      end

      # The tables, made unless there. Processes that open a new file at once each run DDL
      # outside a transaction, and in WAL mode SQLite answers a schema change whose snapshot
      # another process's change made stale with SQLITE_BUSY at once, without waiting (a
      # Strata::RetryableError here): tried again, for up to busy_timeout seconds.
      def create_schema(database, busy_timeout)
        deadline = Clock.monotonic + busy_timeout
        begin
          database.run_active_record(:create_table) { |c| Schema.create(c, @table_name) }
        rescue RetryableError
          raise if Clock.monotonic >= deadline

          sleep(SCHEMA_RETRY_PAUSE)
          retry
        end
      end

      SCHEMA_RETRY_PAUSE = 0.01

      # --- values --------------------------------------------------------------------------------

      def key_hash(key)
        SQL.key_hash(key)
      end

      def binary(string)
        @database.blob(string)
      end

      def expires_at(ttl, now)
        return 0 if ttl.nil? || ttl.zero?

        now + (ttl * 1000).ceil # a negative ttl lands in the past: expired at once
      end

      def count(counter, amount = 1)
        @lock.synchronize { @counters[counter] += amount }
      end
    end
  end
end
