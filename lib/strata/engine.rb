# frozen_string_literal: true

require "strata"
require "strata/computation"
require "strata/computations"
require "strata/counters"
require "strata/failure_reports"
require "strata/meta/host_outages"
require "strata/poller"
require "strata/retries"
require "strata/stack"

module Strata
  # The house without Rails: the tiers a configuration names, the Stack over them, the host's
  # Counters, the Poller, the Retries of failed deletes, the memcached servers' host outages and
  # the FailureReports, built together and closed together. ActiveSupport::Cache::StrataStore
  # is one adapter over it: it turns Rails' entries and options into the stack's bytes and
  # calls the stack itself on its hot paths.
  #
  # Failures: every tier failure, wherever it happens (the stack, the poller's thread, the
  # retries, the outages' record, the adapter), goes to #report_failure, which counts it and,
  # once per outage of its kind (FailureReports), calls on_report with it.
  #
  # It is also a cache of its own, on Strings, for code without Rails (#read, #read_multi,
  # #write, #fetch, #delete, #increment, #invalidate_tags), over the same computations: a fetch
  # inside another's block, the engine's or the adapter's, hands its stamps to the one around it.
  #
  #   engine = Strata::Engine.new(l1: {size: 64 << 20})
  #   engine.fetch("bug/42/json", ttl: 300, tags: ["bugs/42"]) { render(bug).to_json }
  #   engine.invalidate_tags("bugs/42")
  #
  # Computations: the innermost Strata::Computation of a fiber (a fetch, a fetch_multi or a
  # fragment; each holds the one it runs inside) is kept in one fiber-local slot per engine
  # (#current), so that two engines never see each other's.
  #
  # Thread safety: built once; what it holds is safe to use from many threads and processes.
  class Engine
    attr_reader :stack, :counters, :poller, :retries
    # What else the Rails adapter takes as a tag (StrataStore#tag_ids), for #tag_ids' message.
    MODEL_TAGS = ", or (through StrataStore) a saved Strata::Model record, a relation or model of one"
    # The SQL tier when it joins the app's transactions and has tiers above it, else nil.
    attr_reader :app_sql

    # l1, memcached, sql: the tiers' options (Tiers::SharedMemory, Tiers::Memcached, Tiers::SQL).
    #   L1 is there when l1 is given, or when neither of the others is; its path defaults to
    #   SharedMemory.default_path(SharedMemory.default_name(namespace)).
    # fill_wait, coherence_interval: the Stack's. poll_interval, poll_listen: the Poller's
    #   interval and listen.
    # on_report: called as on_report.call(error, tier, held) for each failure told (held: the
    #   failures of its kind held back since it was last told); nil counts them only.
    def initialize(l1: nil, memcached: nil, sql: nil, namespace: nil, fill_wait: Stack::DEFAULT_FILL_WAIT,
      coherence_interval: Dependencies::DEFAULT_COHERENCE_INTERVAL, poll_interval: Poller::DEFAULT_INTERVAL,
      poll_listen: true, on_report: nil)
      @failures = FailureReports.new
      @on_report = on_report
      on_error = method(:report_failure)
      tiers = build_tiers(l1, memcached, sql, namespace)
      @counters = Counters.new(tiers[:l1]) # the host's, in L1's file; without L1 this process's
      polled = Poller.polls?(tiers.values)
      @stack = Stack.new(tiers, on_error: on_error, fill_wait: fill_wait, coherence_interval: coherence_interval, polled: polled,
        counters: @counters, host_ttl: host_ttl(tiers, coherence_interval, polled), undurable: method(:undurable))
      @retries = Retries.new(@stack, on_error: on_error)
      @app_sql = tiers[:l3] if tiers.size > 1 && tiers[:l3]&.app_connections?
      @poller = Poller.start(@stack, on_error: on_error, interval: poll_interval, listen: poll_listen)
      @outages = host_outages(tiers)
      @state_key = :"__strata_engine_#{object_id}"
      @computations = Computations.new
    end

    # --- The cache on Strings ---------------------------------------------------------------
    # key: a non-empty String. value: a String, which comes back in its encoding when that is
    # binary, UTF-8 or US-ASCII (another comes back binary). ttl: seconds (> 0), nil: none.
    # tags: Strings. A tier failure is a miss or a false write, reported (on_report).

    # The value under key, or nil: missing, expired, built from a tag invalidated since, or not
    # a String (an entry the Rails adapter serialized or compressed). A counter reads as its
    # decimal digits.
    def read(key)
      check_key(key)
      string_of(get_bytes(key))
    end

    # key => value for the keys #read would answer.
    def read_multi(*keys)
      keys = keys.flatten
      keys.each { |key| check_key(key) }
      values = {}
      @stack.get_multi(keys).each do |key, bytes|
        value = string_of(noted(key, bytes))
        values[key] = value if value
      end
      values
    end

    # Stores value under key for ttl seconds, stamped with the current versions of tags (inside
    # a #fetch of key: with what its computation depends on). False when no tier took it.
    def write(key, value, ttl: nil, tags: nil)
      check_key(key)
      computation = computing
      if computation&.for?(key)
        return false if computation.spoiled

        stamps = computation.stamps
      else
        stamps = tag_stamps(tags)
      end
      set_bytes(key, string_entry(value, ttl, stamps), ttl) ? true : false
    rescue ValueTooLargeError => error
      report_failure(error)
      false
    end

    # The value under key; on a miss, the block's (a String), written for ttl seconds, stamped
    # with the versions of tags read before it runs and those of every stamped entry it reads.
    # One caller per key computes at a time on this host (and across hosts with memcached),
    # others wait up to fill_wait for its value (Stack#read_through).
    def fetch(key, ttl: nil, tags: nil)
      raise ArgumentError, "fetch needs a block" unless block_given?

      check_key(key)
      check_ttl(ttl) # before the block runs, not when its value is written
      reading_through(key) do |through|
        found = string_of(noted(key, through.get))
        return found if found

        capturing(key, tag_stamps(tags)) do
          value = yield
          raise TypeError, "the block of fetch(#{key.inspect}) returned #{value.class}, not a String" unless value.is_a?(String)

          write(key, value, ttl: ttl)
          value
        end
      end
    end

    # Removes key from every tier. Whether some tier held it.
    def delete(key)
      check_key(key)
      through = claim(key)
      through ? through.delete : @stack.delete(key)
    end

    # Adds by (an Integer, negative to subtract) to the counter under key, atomically across the
    # processes of a host (and the hosts, on memcached), and returns it. A missing key starts at
    # by when it is positive, else at 0; a counter never goes below 0. nil when key holds
    # something else, or the tiers failed.
    def increment(key, by = 1, ttl: nil)
      check_key(key)
      raise TypeError, "increment by an Integer, got #{by.inspect}" unless by.is_a?(Integer)

      begin
        (by >= 0) ? @stack.incr(key, by, ttl: ttl, initial: by) : @stack.decr(key, -by, ttl: ttl, initial: 0)
      rescue ArgumentError
        nil # the tier's answer for a value that is not a counter; the arguments were checked above
      end
    end

    # Gives each tag a new version: every entry stamped with an older one misses from then on.
    # False when a tier could neither take a new version nor drop its old one (reported).
    # stale_for: seconds (> 0) for a soft invalidation: such entries are soft-stale that long
    # first (Dependencies#soft_stale?; the stack hands them over as Entry.soft_stale copies).
    def invalidate_tags(*tags, stale_for: nil)
      tags = tags.flatten
      raise ArgumentError, "invalidate_tags needs at least one tag" if tags.empty?

      invalidate(tag_ids(tags), stale_for: Engine.stale_for(stale_for))
    end

    # seconds as a soft invalidation's window (a Float > 0), or nil for nil; ArgumentError
    # otherwise.
    def self.stale_for(seconds)
      return nil if seconds.nil?
      unless seconds.is_a?(Numeric) && seconds.to_f.finite? && seconds > 0
        raise ArgumentError, "stale_for: must be a number of seconds > 0, got #{seconds.inspect}"
      end

      seconds.to_f
    end

    # --- What the adapter and the methods above share ---------------------------------------

    # The entry bytes under key, or nil: through the claim on key of a computation under way in
    # this fiber (#claim; ReadThrough#get: its first answer, until this fiber wrote or deleted
    # key itself), noted for the computation under way (#noted). info: as Stack#get's.
    def get_bytes(key, info = nil)
      through = claim(key)
      noted(key, through ? through.get(info) : @stack.get(key, info))
    end

    # Stores entry bytes under key for ttl seconds (nil: none), with add when unless_exist:
    # through the claim on key of a computation under way in this fiber (#claim;
    # ReadThrough#set: the fill), else Stack#set or #add. Their answer; raises
    # Strata::ValueTooLargeError when no tier could hold the bytes.
    def set_bytes(key, bytes, ttl, unless_exist = false)
      through = claim(key)
      if unless_exist
        through ? through.add(bytes, ttl: ttl) : @stack.add(key, bytes, ttl: ttl)
      else
        through ? through.set(bytes, ttl: ttl) : @stack.set(key, bytes, ttl: ttl)
      end
    end

    # The tag ids of tags (non-empty Strings or Symbols), without repeats.
    def tag_ids(tags)
      ids = tags.map do |tag|
        if !(tag.is_a?(String) || tag.is_a?(Symbol)) || tag.empty?
          raise ArgumentError, "tags: a tag must be a non-empty String or Symbol#{MODEL_TAGS}, got #{tag.inspect}"
        end

        Dependencies.tag_id(tag.to_s)
      end.uniq
      raise ArgumentError, "tags: at most #{Entry::MAX_STAMPS} tags, got #{ids.size}" if ids.size > Entry::MAX_STAMPS

      ids
    end

    # The current versions of tag ids, in order; a missing one is created.
    def versions(ids)
      ids.empty? ? Entry::NO_STAMPS : @stack.dependencies.versions(ids)
    end

    # New versions for tag ids, counted (Counters); one whose authority missed it is retried
    # (Retries), hard. False when a tier could neither take a new version nor drop its old one.
    # stale_for: seconds (a Float > 0) for a soft invalidation, else nil.
    def invalidate(ids, stale_for: nil)
      @counters.add(Counters::INVALIDATIONS)
      @counters.add(Counters::VERSIONS_BUMPED, ids.size)
      undone = []
      done = @stack.dependencies.bump(ids, undone, stale_for: stale_for) # reports its tiers' failures
      @retries.add_tags(undone) unless undone.empty? # the authority keeps the old versions meanwhile
      done
    end

    # The innermost Strata::Computation under way in this fiber, or nil. The slot is read and
    # written in this section only.
    def current
      Thread.current[@state_key]
    end

    # The innermost computation of this fiber whose block runs (Computation#computing?), or nil.
    def computing
      computation = Thread.current[@state_key]
      computation = computation.outer while computation && !computation.computing?
      computation
    end

    # The read-through of key that a computation under way in this fiber holds (the innermost
    # one that does), or nil. Reads, writes and deletes of key in the fiber go through it.
    def claim(key)
      computation = Thread.current[@state_key]
      while computation
        through = computation.claim(key)
        return through if through

        computation = computation.outer
      end
      nil
    end

    # Runs the block as the read-through of key (Stack#read_through), yielding it: a fetch's
    # computation holds it as its claim (#claim) meanwhile, and it is finished after. When a
    # computation under way in this fiber claims key already (a fetch of key inside its own
    # block, or inside fetch_multi's), the block runs in that claim. host_probed: the host table
    # was read for key just before, and held nothing live.
    def reading_through(key, host_probed = false)
      outer = Thread.current[@state_key]
      if outer && (held = claim(key))
        return yield(held)
      end

      @stack.read_through(key, host_probed) do |through|
        Thread.current[@state_key] = Computation.new(key, outer, through)
        begin
          yield through
        ensure
          Thread.current[@state_key] = outer
        end
      end
    end

    # Runs the block as the computation of the entries under keys (one key, or an Array),
    # stamped with stamps ([[tag id, version], ...], read before the block, so that an
    # invalidation during it makes the entry miss) and those of what the block reads (#noted).
    # Yields the Strata::Computation: the fetch of keys whose read-through is innermost (it
    # missed), else a new one, current until the block ends; then the one around it depends on
    # what it depended on. claims: fetch_multi's Hash of read-throughs (Computation#claims),
    # which are finished after, with unread set until its own read.
    def capturing(keys, stamps, claims = nil)
      current = Thread.current[@state_key]
      # The fetch's own computation, which read and missed: it stays current after the block,
      # until its read-through ends (#reading_through).
      own = claims.nil? && current && !current.computing? && current.keys == keys
      computation = own ? current : Computation.new(keys, current, claims)
      outer = computation.outer
      computation.unread = true if claims
      computation.start(stamps)
      @computations.enter
      Thread.current[@state_key] = computation
      begin
        yield computation
      ensure
        computation.stop
        @computations.leave
        Thread.current[@state_key] = current unless own
        claims&.each_value(&:finish)
        if outer
          outer.add(computation.words)
          outer.spoil! if computation.spoiled
        end
      end
    end

    # Whether no computation runs in this process (Computations#idle?): a read may then skip
    # its stamps.
    def idle?
      @computations.idle?
    end

    # bytes, read under key (nil: not known); when they are a stamped entry, the computation
    # under way in this fiber depends on them too (Computation#read). Every read whose bytes are
    # used passes them here. While no computation runs in the process, a hit looks nothing up.
    def noted(key, bytes)
      if bytes && !@computations.idle? && (Entry.stamped?(bytes) || Entry.soft_stale?(bytes)) && (computation = computing)
        computation.read(key, bytes)
      end
      bytes
    end

    # The names of the tiers that can't list their keys (delete_matched needs every one to).
    def unlisted_tiers
      @stack.tier_names.reject { |name| @stack[name].capabilities[:listing] }
    end

    # Counts error (from tier, else error.tier) and tells on_report of it unless its outage was
    # told already (FailureReports). Every tier failure comes here.
    def report_failure(error, tier = nil)
      tier ||= error.tier if error.respond_to?(:tier)
      held = @failures.record(error, tier)
      @on_report&.call(error, tier, held) if held
    end

    # The tiers' statistics, the failure counts (FailureReports#stats) and the host's counters
    # (Counters#totals, with shared: false when there is no L1 table to keep them in and they
    # are this process's only).
    def stats
      {tiers: @stack.stats}.merge!(@failures.stats, counters: @counters.totals.merge!(shared: @counters.shared?))
    end

    # Stops the poller and the retries and releases the tiers. Nothing works afterwards.
    def close
      @poller&.stop
      @retries.stop
      @outages&.release(@stack[:l2].client.ring)
      @stack.close
    end

    private

    def check_key(key)
      raise TypeError, "a key must be a String, got #{key.class}" unless key.is_a?(String)
      raise ArgumentError, "a key must not be empty" if key.empty?
    end

    # [[tag id, version], ...] for tags (nil: none), read now.
    def tag_stamps(tags)
      return Entry::NO_STAMPS if tags.nil?

      ids = tag_ids(tags.is_a?(Array) ? tags : [tags])
      ids.zip(versions(ids))
    end

    def check_ttl(ttl)
      return if ttl.nil? || (ttl.is_a?(Numeric) && ttl > 0)

      raise ArgumentError, "ttl must be nil or a number of seconds > 0, got #{ttl.inspect}"
    end

    # The entry bytes for the String value.
    def string_entry(value, ttl, stamps)
      raise TypeError, "a value must be a String, got #{value.class}" unless value.is_a?(String)

      check_ttl(ttl)
      expires_at = ttl ? Entry.milliseconds(Entry.now / 1000.0 + ttl) : 0
      Entry.encode(value, flags: Entry.string_kind(value) || Entry::BINARY, expires_at: expires_at, stamps: stamps)
    end

    # The String value of bytes read (see #read), or nil.
    def string_of(bytes)
      return nil unless bytes
      return bytes.dup if Entry.counter?(bytes)

      entry = Entry.decode(bytes)
      return nil if entry.expired? || entry.compressed? || !(encoding = entry.string_encoding)

      entry.payload.force_encoding(encoding)
    rescue CorruptError => error
      report_failure(error)
      nil
    end

    # The stack's undurable: keys whose write or delete the SQL tier missed, deleted there once
    # it answers (Retries).
    def undurable(keys)
      @retries.add_keys(keys)
    end

    # Top first. With no tier option given, l1's missing size is the error to report.
    # An L1 file or directory that is not safely this user's (another local user made it
    # first, say) leaves the engine without L1, reported once, when another tier can serve:
    # an app must not fail to boot over another user's file. With L1 alone it raises.
    def build_tiers(l1, memcached, sql, namespace)
      tiers = {}
      if l1 || !(memcached || sql)
        begin
          tiers[:l1] = build_l1(l1 || {}, namespace)
        rescue UnsafeFileError => error
          raise unless memcached || sql

          report_failure(error, :l1)
        end
      end
      tiers[:l2] = build_memcached(memcached) if memcached
      tiers[:l3] = build_sql(sql) if sql
      tiers
    end

    # The cap on L1's TTLs (Stack's host_ttl): coherence_interval when L1 sits above memcached,
    # where other hosts write, and no poller tells this host of their writes. With a poller,
    # Dependencies::POLLED_TTL, as for its copies of tag versions: the bound for a change the
    # poller could not see (its row committed more than gap_timeout after it was appended).
    # Else none: L1 alone or over an SQL tier of this host alone has no other host.
    def host_ttl(tiers, coherence_interval, polled)
      return nil unless tiers.key?(:l1)
      return Dependencies::POLLED_TTL if polled

      coherence_interval if tiers.key?(:l2)
    end

    # With L1 and memcached: the host's record of the memcached servers this process marks
    # down (Meta::HostOutages, in L1), which `strata stats` shows; its failures are reported as
    # L1's. Without L1 a server's down since stays this process's.
    def host_outages(tiers)
      return nil unless tiers[:l1] && tiers[:l2]

      outages = Meta::HostOutages.new(tiers[:l1], on_error: method(:report_failure))
      tiers[:l2].client.ring.watcher = outages
      outages
    end

    # Active Record is loaded only for an engine with an SQL tier.
    def build_sql(options)
      raise ArgumentError, "StrataStore needs sql: {path: \"file.sqlite3\"} or sql: {connection_class: SomeRecord}" unless options.is_a?(Hash)

      require "strata/tiers/sql"
      Tiers::SQL.new(**options)
    end

    def build_memcached(options)
      raise ArgumentError, "StrataStore needs memcached: {servers: [\"host:port\", ...]}" unless options.is_a?(Hash) && options[:servers]

      Tiers::Memcached.new(**options)
    end

    def build_l1(options, namespace)
      options = options.dup
      options[:path] ||= Tiers::SharedMemory.default_path(Tiers::SharedMemory.default_name(namespace))
      raise ArgumentError, "StrataStore needs l1: {size: bytes} for its shared-memory table" unless options[:size]

      Tiers::SharedMemory.new(**options)
    end
  end
end
