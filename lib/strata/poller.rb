# frozen_string_literal: true

require "securerandom"
require "active_support/fork_tracker"
require "strata/clock"
require "strata/entry"
require "strata/errors"

module Strata
  # The cross-host half of coherence (docs/coherence.md): one poller per host
  # reads the SQL tier's invalidation log past its last sequence number and drops this host's
  # copies of what each row names. A tag row drops the tag's version in every tier above SQL
  # (Dependencies#drop_copies), a key row deletes the key from the shared tiers between L1 and
  # SQL (memcached) and then from L1, a clear row clears L1. An L1 copy that equals what the
  # tier below holds when the row is applied is no older than the change and stays: a host's
  # own writes keep their L1 copies. Applying a row only ever deletes, so applying one twice is
  # harmless.
  #
  # Why memcached first (docs/coherence.md, "The ordering rule"): the writer commits its row in
  # SQL before its change reaches memcached, which on a real network takes a round trip or more
  # (or never, when the writer dies between the two). Were L1 dropped alone, this host's next
  # read could take memcached's old copy back into L1, and no later row would drop it. So a
  # copy memcached holds that differs from the SQL tier's bytes, read after the row committed,
  # is deleted first. A copy equal to them stays (the writer's own, usually), and so does a key
  # with no copy: a fill's lease may be pending there, and a fill under a lease checks the SQL
  # tier itself once it has committed (Copies#settle_fill). A key whose server is down in this
  # process is deleted (on the gutter, and noted for the server's return). A key that could not
  # be settled (memcached unreachable, stopped, or down) is kept and settled again every
  # RESETTLE_INTERVAL, then dropped from L1 again, until its server answers (memcached is read
  # SETTLE_BATCH keys at a time, so that a round of large values keeps each exchange short);
  # until then the rounds vouch for nothing. A tag whose version could not be dropped in
  # memcached is kept and dropped again the same way: were the rounds to vouch, a copy read
  # back from memcached's old one would be served for POLLED_TTL. At most MAX_UNSETTLED keys
  # and as many tags are kept (the oldest go first, reported), in the holder's memory; the state
  # (below) names the log position after which their rows lie, and a process that takes the
  # election over from another applies the rows from there again.
  #
  # One per host: every process with a store runs a thread, and the one whose token sits under
  # ELECTION_KEY in L1 (added with a TTL of lease seconds, refreshed by compare-and-set on every
  # round) polls; the others only try to take the key once it lapses (its holder died or
  # stopped). Two holders for a moment (a holder stalled past its lease) apply rows twice, which
  # costs nothing. The reserved keys start with a NUL byte, so Stack#keys never lists them.
  #
  # Where it is: STATE_KEY in L1 holds the last sequence number, when the log was last read and
  # the gaps (below), so that a new holder continues where the last one stopped. STATE_KEY is an
  # ordinary item, which a full bucket may evict: the process that wrote a state keeps it too,
  # and reads it back when L1 has none. Every row up to its sequence number was applied to this
  # same table, so going on from there (or from earlier: rows only delete) misses nothing. A
  # state that no process here has (lost with its holder: evicted, L1 cleared, a new L1 file),
  # older than half of log_retention (the rows since may have been trimmed) or ahead of the log
  # (a log table made anew) can't be trusted to have seen every change: L1 is cleared, and the
  # poller goes on from RESYNC_WINDOW rows before the log's head, whose rows it applies again
  # (they only delete). A store that opens an L1 with no entries and no state marks it fresh
  # first (#mark_fresh), and its first round clears nothing: every copy in it was read after the
  # mark, and the window's rows cover the changes since (unless more than RESYNC_WINDOW rows
  # were appended before that round).
  #
  # Gaps: on PostgreSQL and MySQL a row's id is drawn at insert and seen at commit, so a reader
  # may see id 11 before id 10 commits. Ids skipped between two rows read are kept as gaps and
  # read again on every round until they appear or gap_timeout seconds pass (a rolled-back
  # transaction leaves a gap that never fills); at most MAX_GAPS, the newest kept. A change whose
  # transaction commits more than gap_timeout after it appended its row is missed by hosts that
  # read past it: their copies then live until they expire or are written again.
  #
  # Waking: every interval seconds. On PostgreSQL with listen, the holder LISTENs on the log's
  # channel on a connection of its own (SQL::Listener), so a commit wakes it at once, and
  # between notifications it reads every LISTENING_INTERVAL only (or interval, if longer): those
  # rounds renew the lease and vouch, and would catch a notification lost on a live connection,
  # which PostgreSQL does not lose. A listener that fails ends the wait at once, and the holder
  # reads every interval until it listens again.
  #
  # Raw tags: each round first converts the tags that the strata:triggers migration's SQLite
  # triggers appended as text (SQL#apply_raw_tags) into versions and log rows, which that round
  # and the other hosts' read: a raw UPDATE on SQLite reaches every host within about two rounds.
  #
  # Failures (a database or memcached down, anything the thread raises) go to on_error, which
  # the store reports once per outage (FailureReports), and the thread goes on with the next
  # round. The thread never keeps the process alive, takes no lock but the tiers' own, is
  # started again in a forked child, and stops with #stop (the store's close).
  class Poller
    DEFAULT_INTERVAL = 0.05
    ELECTION_KEY = "\x00strata:poller".b.freeze
    STATE_KEY = "\x00strata:poller:state".b.freeze
    # Seconds a gap is read again before it counts as rolled back.
    DEFAULT_GAP_TIMEOUT = 10
    MAX_GAPS = 1_000
    # Log rows before the head that a resync reads again (and whose missing ids become gaps).
    RESYNC_WINDOW = 1_000
    # Pages of Tiers::SQL::LogStatements::PAGE rows read in one round; more wait for the next
    # round, which follows at once.
    PAGES_PER_ROUND = 10
    # The shortest lease, in seconds; else 20 intervals.
    MIN_LEASE = 1.0
    # Seconds between a listening holder's rounds when nothing wakes it (at least interval, at
    # most half the vouching time): a quarter of the shortest lease, which the rounds renew, so
    # that a thread scheduled late on a busy host still renews it in time.
    LISTENING_INTERVAL = MIN_LEASE / 4
    STATE_PACK = "q<*"
    NOTHING = {}.freeze
    NOTHING_LEFT = [].freeze
    # The sequence number of a state that mark_fresh wrote: L1 was empty, nothing to clear.
    FRESH = -1
    # Seconds the thread waits at a time, so that #stop ends it within about this long.
    WAIT_SLICE = 0.1
    # Keys a shared tier could not settle, kept for the next rounds (#settle_shared).
    MAX_UNSETTLED = 10_000
    # Keys settled in one call to a shared tier.
    SETTLE_BATCH = 32
    # Seconds between two tries at the keys kept, while they fail.
    RESETTLE_INTERVAL = 0.25
    # Seconds after it is made that a poller that has never read the log does not report a
    # missing Active Record connection (#booting?).
    BOOT_GRACE = 60

    # The pollers started and not stopped, for #restart_after_fork. Each is held by its running
    # thread anyway.
    @pollers = {}.compare_by_identity
    @pollers_lock = Mutex.new

    class << self
      # A started poller for stack when it has a host tier (L1) above an SQL tier that writes
      # the log, else nil. on_error: called as on_error.call(error, tier_name). interval: seconds
      # between rounds (> 0). listen: LISTEN for the log's notifications where the database has them.
      def start(stack, on_error:, interval: DEFAULT_INTERVAL, listen: true, gap_timeout: DEFAULT_GAP_TIMEOUT)
        unless interval.is_a?(Numeric) && interval.real? && interval.finite? && interval.positive?
          raise ArgumentError, "poll_interval must be a positive number of seconds, got #{interval.inspect}"
        end
        raise ArgumentError, "poll_listen must be true or false, got #{listen.inspect}" unless [true, false].include?(listen)

        host, sql, shared = sources(stack.tier_names.map { |name| stack[name] })
        return nil unless host

        poller = new(host, sql, stack.dependencies, on_error: on_error, interval: interval, listen: listen, gap_timeout: gap_timeout,
          shared: shared)
        poller.mark_fresh
        poller.start
      end

      # Whether #start runs a poller for a stack of tiers (top first).
      def polls?(tiers)
        !sources(tiers).nil?
      end

      # [host tier, SQL tier that writes the log, [the tiers between them]] when tiers (top
      # first) have both, else nil.
      def sources(tiers)
        host = tiers.index { |tier| tier.capabilities[:host] }
        sql = tiers.index { |tier| tier.capabilities[:invalidation_log] }
        [tiers[host], tiers[sql], tiers[(host + 1)...sql]] if host && sql && host < sql
      end

      # After a fork: every poller of the parent starts again in the child.
      def restart_after_fork
        @pollers_lock.synchronize { @pollers.keys }.each(&:restart_after_fork)
      end

      def started(poller)
        @pollers_lock.synchronize { @pollers[poller] = true }
      end

      def stopped(poller)
        @pollers_lock.synchronize { @pollers.delete(poller) }
      end
    end

    # Starts the pollers again in a forked child as Process._fork returns there, after every
    # ActiveSupport::ForkTracker callback: prepended after ForkTracker's own hook (required
    # above), it wraps that hook. Active Record discards the parent's connections in one of
    # those callbacks; a thread restarted before it could take one of them out of a pool and
    # talk on a socket the parent still uses.
    module RestartAfterFork
      def _fork
        pid = super
        Poller.restart_after_fork if pid.zero?
        pid
      end
    end
    Process.singleton_class.prepend(RestartAfterFork)

    # shared: the tiers between host and sql (memcached), whose copies of a changed key go
    # before L1's.
    def initialize(host, sql, dependencies, on_error:, interval:, listen:, gap_timeout:, shared: [])
      @host = host
      @sql = sql
      @shared = shared.freeze
      @unsettled = {} # key => true: a shared tier could not settle it (#settle_shared); oldest first
      @undropped = {} # tag id => true: a copy of its version could not be dropped (#apply); oldest first
      # The sequence number after which the log's rows name every key and tag kept above, or nil
      # when none is kept: written into the state, so that another holder applies them again.
      @unsettled_since = nil
      @resettle_at = 0.0
      @dependencies = dependencies
      @on_error = on_error
      @interval = interval.to_f
      @lease = [interval * 20, MIN_LEASE].max
      @listen = listen
      @gap_timeout_ms = (gap_timeout * 1000).ceil
      @retention_ms = (sql.log_retention * 1000).ceil
      @stopping = false
      @thread = nil
      @listener = nil
      @token = Poller.token
      @head_checked = nil
      @kept_state = nil # the last state this process wrote (#read_state)
      @booted_at = Clock.monotonic
      @read_once = false
      # Milliseconds a round vouches for the host tier's polled copies (#vouch); nil when it
      # keeps none.
      @vouch_ms = (dependencies.coherence_interval * 1000).floor if host.capabilities[:polled_copies]
      listening = [LISTENING_INTERVAL, @vouch_ms && @vouch_ms / 2000.0].compact.min
      @listening_interval = [@interval, listening].max # #pause
    end

    def start
      @stopping = false
      @token = Poller.token
      @thread = Thread.new { run }
      @thread.name = "strata-poller"
      @thread.report_on_exception = false
      # A fork starts the thread again in the child (restart_after_fork): Puma's preload_app! and
      # others that look for threads that don't survive a fork may pass this one over.
      @thread.thread_variable_set(:fork_safe, true)
      Poller.started(self)
      self
    end

    # Stops the thread (within about WAIT_SLICE), gives the election up and closes the
    # listener. Idempotent.
    def stop
      return nil if @stopping

      @stopping = true
      Poller.stopped(self)
      thread = @thread
      @thread = nil
      thread.kill if thread && !thread.join(WAIT_SLICE * 10)
      give_up
      close_listener
      nil
    end

    # A process's election token: its pid (4 bytes, big-endian), then 12 random bytes, so that
    # another process of the host can tell which one polls (Poller.holder_pid).
    def self.token
      [Process.pid].pack("N") + SecureRandom.bytes(12)
    end

    # The pid of the process whose thread holds host's election (a Tiers::SharedMemory, also one
    # opened by another program on the same file), or nil when none holds it.
    def self.holder_pid(host)
      token = host.get(ELECTION_KEY)
      token.unpack1("N") if token&.bytesize == 16
    end

    # Whether this process's thread holds the election right now.
    def holding?
      @token && safely { @host.get(ELECTION_KEY) } == @token
    end

    # The last sequence number applied (from L1), or nil when there is no state.
    def last_seen
      state = read_state
      state && state[0]
    end

    def restart_after_fork
      @listener&.discard
      @listener = nil
      start unless @stopping || @thread.nil?
    end

    # When L1 holds no entry and no state, marks it fresh (STATE_KEY with FRESH): the first round
    # then has nothing to clear. Run before the store can write anything (Poller.start), so that
    # every entry L1 gets after the mark was read or written after it. O(L1 slots), once.
    def mark_fresh
      return if @host.get(STATE_KEY) || @host.stats[:entries] > 0

      @host.add(STATE_KEY, [FRESH, Entry.now].pack(STATE_PACK))
    rescue TierError => error
      report(error) # the first round then clears L1
    end

    # One round: takes or keeps the election and, when held, reads and applies the log. True
    # when rows were left for the next round. For the thread, and for tests that drive rounds.
    def round
      unless hold?
        close_listener
        return false
      end

      listening
      more = poll
      @read_once = true
      more
    end

    private

    def run
      until @stopping
        begin
          unless round || @stopping
            listener = listener_for_wait
            wait(listener, pause(listener))
          end
        rescue => error
          report(error)
          wait(nil)
        end
      end
    end

    # Seconds until the next round: interval; at most DEFAULT_INTERVAL while something is kept
    # unsettled; @listening_interval while listener (the holder's, on PostgreSQL) can wake it.
    def pause(listener)
      return [@interval, DEFAULT_INTERVAL].min unless settled?

      listener ? @listening_interval : @interval
    end

    # Waits seconds, or less when listener is notified or fails, or #stop is called. Bound:
    # seconds / WAIT_SLICE waits.
    def wait(listener, seconds = @interval)
      deadline = Clock.monotonic + seconds
      until @stopping
        left = deadline - Clock.monotonic
        break if left <= 0
        slice = [left, WAIT_SLICE].min
        if listener
          break if notified?(listener, slice) || @listener.nil?
        else
          sleep(slice)
        end
      end
    end

    # Whether a notification came within seconds; a listener that fails is reported and
    # dropped (so #wait ends), after seconds slept.
    def notified?(listener, seconds)
      listener.wait(seconds)
    rescue TierError => error
      report(error)
      @listener = nil
      sleep(seconds)
      false
    end

    def listener_for_wait
      (@listen && holding?) ? listening : nil
    end

    # The holder's listener, LISTENing before the round reads the log, so that no commit after
    # the read goes unnotified; nil without one.
    def listening
      return nil unless @listen

      @listener ||= @sql.log_listener
      @listener&.listen
    rescue TierError => error
      report(error)
      nil
    end

    def close_listener
      @listener&.close
      @listener = nil
    end

    # Takes the election key when it is free, or renews it when it is ours.
    def hold?
      held, token = @host.get_with_cas(ELECTION_KEY)
      return @host.add(ELECTION_KEY, @token, ttl: @lease) if held.nil?
      return false unless held == @token

      @host.cas(ELECTION_KEY, @token, token, ttl: @lease)
    end

    def give_up
      @host.delete(ELECTION_KEY) if holding?
    rescue TierError
      nil # the lease lapses by itself
    end

    # Converts the raw tags SQLite's triggers left (SQL#apply_raw_tags), then reads the log past
    # the state's sequence number and applies what it finds; true when rows were left for the
    # next round.
    def poll
      # Before the raw tags are converted: a change committed before now is in the log this
      # round reads, which #vouch counts on.
      now = Entry.now
      @sql.apply_raw_tags # the SQLite triggers' tags become log rows, read below
      state = read_state
      return resync(now, clear: false) if state && state[0] == FRESH
      return resync(now) if state.nil? || now - state[1] > @retention_ms / 2

      seq, since, gaps = parse_state(state)
      # Taken over from another process, which kept keys or tags it could not settle: their
      # rows are applied again (they only delete), as that process's memory went with it.
      seq = since if since && since < seq && state != @kept_state
      rows = []
      PAGES_PER_ROUND.times do # bound: PAGES_PER_ROUND pages
        page = @sql.log_after(rows.empty? ? seq : rows.last[0])
        rows.concat(page)
        break if page.size < Tiers::SQL::LogStatements::PAGE
      end
      return resync(now) if rows.empty? && seq > 0 && log_behind?(seq)

      rows.concat(@sql.log_rows(gaps.keys)) unless gaps.empty?
      resettle
      applied = apply(rows)
      @unsettled_since = settled? ? nil : [@unsettled_since, seq, *rows.map { |id, _, _| id - 1 }].compact.min
      seq = track_gaps(rows, seq, gaps, now)
      write_state(seq, now, gaps)
      more = rows.size >= PAGES_PER_ROUND * Tiers::SQL::LogStatements::PAGE
      vouch(now) if applied && settled? && !more
      more
    end

    # Every change committed before now (when this round began to read the log) has been
    # applied to L1: its polled copies of tag versions (Dependencies#copy; table.h, POLLED
    # ITEMS) are good until coherence_interval after it. A round that fails, leaves rows for the
    # next or could not drop a copy vouches for nothing; when no round vouches any more, they
    # lapse. A change the log shows too late (a gap given up after gap_timeout) is not seen
    # here: a copy it made stale lives until its POLLED_TTL.
    def vouch(now)
      @host.polled_until = now + @vouch_ms if @vouch_ms
    end

    # Clears L1 (unless it was fresh) and goes on from RESYNC_WINDOW rows before the log's
    # head (see the class comment).
    def resync(now, clear: true)
      # From just before the window's first row: ids below it that are missing (trimmed, rolled
      # back) are not gaps.
      first = @sql.log_after([@sql.log_head - RESYNC_WINDOW, 0].max).first
      from = first ? first[0] - 1 : @sql.log_head
      if clear
        @host.clear
        hold?
      end
      write_state(from, now, {})
      true
    end

    # A tag row drops the copies of the tag's version that differ from the authority's; a key
    # row, L1's copy of the key unless it is what the SQL tier holds now (read after the row
    # committed, so that copy is no older than the change: this host's own write, say, which
    # then keeps its L1 copy); a clear row clears L1. Whether every tag's copies that had to go
    # went (a failure is reported; the others raise).
    def apply(rows)
      keys = []
      tag_ids = []
      cleared = false
      rows.each do |_id, tag_id, key|
        if tag_id
          tag_ids << tag_id
        elsif key
          keys << key.b
        else
          cleared = true
        end
      end
      # memcached's copies too, whether or not L1 is cleared
      dropped = tag_ids.empty? || @dependencies.drop_copies(*tag_ids.uniq)
      unless dropped
        tag_ids.each { |id| @undropped[id] = true }
        forget_oldest(@undropped, "changed tags' versions")
      end
      if cleared
        @host.clear
        hold?
      end
      unsettled = drop_changed(keys.uniq, cleared)
      unless unsettled.empty?
        unsettled.each { |key| @unsettled[key] = true }
        forget_oldest(@unsettled, "changed keys")
      end
      dropped
    end

    # Deletes L1's copies of keys unless the SQL tier holds the same bytes, after settling the
    # shared tiers' copies (#settle_shared). A key L1 does not hold is deleted all the same: the
    # delete marks the key's fill lock, so a fill under way on this host, which may have
    # committed below before the change, adds nothing to L1 (SingleFlight#fill_write).
    # host_cleared: L1 was cleared just now. The keys a shared tier could not settle.
    def drop_changed(keys, host_cleared = false)
      return NOTHING_LEFT if keys.empty?

      if @shared.empty?
        return NOTHING_LEFT if host_cleared

        unsettled = NOTHING_LEFT
        held = @host.get_multi(keys)
        current = held.empty? ? NOTHING : @sql.peek_multi(held.keys)
      else
        current = @sql.peek_multi(keys)
        # L1 holding SQL's bytes already: this host wrote or read them after the change, and
        # put them in memcached too (a write goes bottom-up, a backfill or a fill copies them to
        # every tier above SQL); memcached's copy is left to the hosts that don't hold them.
        # (L1 is read again after the settle: a copy taken from memcached meanwhile must go.)
        current_here = host_cleared ? NOTHING : @host.get_multi(keys)
        unsettled = settle_shared(keys.reject { |key| current_here[key] && current_here[key] == current[key] }, current)
        return unsettled if host_cleared

        held = @host.get_multi(keys)
      end
      keys.each { |key| @host.delete(key) unless held.key?(key) && current[key] == held[key] }
      unsettled
    end

    # Settles keys in every shared tier against current (the SQL tier's bytes, read after their
    # rows committed): see the class comment. The keys a tier could not settle (it failed,
    # wholly or on one server: reported; or the key's server is down).
    def settle_shared(keys, current)
      unsettled = []
      @shared.each do |tier|
        # Bound: keys.size / SETTLE_BATCH calls of each kind, each reading at most SETTLE_BATCH
        # values (a round of large values must not make one exchange outlast the timeout).
        keys.each_slice(SETTLE_BATCH) { |batch| settle_batch(tier, batch, current, unsettled) }
      end
      unsettled
    end

    # #settle_shared of a batch of keys in one shared tier; adds what it could not settle to
    # unsettled.
    def settle_batch(tier, keys, current, unsettled)
      # Keys whose own server is down here: their reads are a gutter's, and their deletes only
      # noted for the server's return (so never settled here).
      away = tier.capabilities[:gutter] ? keys.select { |key| tier.gutter?(key) } : NOTHING_LEFT
      stale = begin
        held = tier.peek_multi(keys)
        keys.select { |key| (held.key?(key) && held[key] != current[key]) || away.include?(key) }
      rescue TierError => error # PartialError too: what it could not read goes
        report(error)
        keys
      end
      return if stale.empty?

      done = begin
        tier.delete_multi(stale)
      rescue PartialError => error
        report(error)
        error.result
      rescue TierError => error
        report(error)
        NOTHING
      end
      stale.each { |key| unsettled << key unless done.key?(key) && !away.include?(key) }
    end

    # Whether nothing is kept from earlier rounds: every key settled, every version dropped.
    def settled?
      @unsettled.empty? && @undropped.empty?
    end

    # Settles the keys kept from earlier rounds again (#drop_changed), and drops the versions
    # kept (Dependencies#drop_copies), at most once per RESETTLE_INTERVAL: a memcached that
    # keeps failing is asked about them that often.
    def resettle
      return if settled? || Clock.monotonic < @resettle_at

      left = drop_changed(@unsettled.keys)
      @unsettled = left.to_h { |key| [key, true] } # one assignment: another thread may look
      @undropped = {} if !@undropped.empty? && @dependencies.drop_copies(*@undropped.keys)
      @resettle_at = Clock.monotonic + RESETTLE_INTERVAL unless settled?
    end

    # Keeps at most MAX_UNSETTLED of kept (oldest go first, reported as what).
    def forget_oldest(kept, what)
      return if kept.size <= MAX_UNSETTLED

      excess = kept.size - MAX_UNSETTLED
      excess.times { kept.shift } # bound: excess
      report(TierError.new("#{excess} #{what} could not be deleted from memcached and are no longer retried"))
    end

    # The new sequence number after rows (the log's rows past seq and the gaps that appeared);
    # gaps (id => unix ms first missed) loses those found and those older than gap_timeout,
    # and gains the ids skipped past seq.
    def track_gaps(rows, seq, gaps, now)
      next_id = seq + 1
      rows.each do |id, _tag_id, _key|
        if gaps.delete(id) || id <= seq
          next
        end

        # bound: the newest MAX_GAPS ids skipped
        [next_id, id - MAX_GAPS].max.upto(id - 1) { |missing| gaps[missing] = now }
        next_id = id + 1
      end
      gaps.delete_if { |_id, missed| now - missed > @gap_timeout_ms }
      gaps.shift while gaps.size > MAX_GAPS # the oldest ids first: they were added first
      next_id - 1
    end

    # Whether the log's head is below seq (a log made anew), asked at most once a lease: an idle
    # round costs one statement, not two.
    def log_behind?(seq)
      now = Clock.monotonic
      return false if @head_checked && now - @head_checked < @lease

      @head_checked = now
      @sql.log_head < seq
    end

    # L1's state, else the one this process last wrote (see the class comment).
    def read_state
      bytes = @host.get(STATE_KEY)
      return @kept_state unless bytes

      state = bytes.unpack(STATE_PACK)
      state if state.size >= 2 && state.size.even?
    end

    # [sequence number, the unsettled one (or nil), gaps] of a state read_state gave.
    def parse_state(state)
      rest = state.drop(2)
      since = nil
      if rest[0]&.negative?
        since = -rest[0] - 1
        rest = rest.drop(2)
      end
      [state[0], since, rest.each_slice(2).to_h]
    end

    # The state is [seq, unix ms of the read, gaps as id, unix ms pairs], with first, while keys
    # or tags are kept unsettled, the pair [-(unsettled since + 1), 0]: a gap of no row to a
    # process that does not know the pair, which drops it as timed out.
    def write_state(seq, now, gaps)
      since = @unsettled_since ? [-(@unsettled_since + 1), 0] : NOTHING_LEFT
      @kept_state = [seq, now, *since, *gaps.flatten]
      @host.set(STATE_KEY, @kept_state.pack(STATE_PACK))
    end

    def safely
      yield
    rescue TierError => error
      report(error)
      nil
    end

    # As the poller's own kind of failure (tier :poller), so that an outage the poller meets
    # first still has the app's own failures told.
    def report(error)
      @on_error&.call(error, :poller) unless booting?(error)
    rescue
      nil # a reporter that fails must not end the thread
    end

    # Rails makes the cache store before Active Record connects, so a poller over the app's
    # database (connection_class:) finds no connection pool in its first rounds: not a failure
    # while it has never read the log, for BOOT_GRACE seconds; the next round tries again. The
    # store's own reads and writes report a connection that never comes.
    def booting?(error)
      return false if @read_once || Clock.monotonic - @booted_at > BOOT_GRACE
      return false unless defined?(ActiveRecord::ConnectionNotEstablished)

      seen = error
      # Bound: the error and at most 3 causes.
      4.times do
        return true if seen.is_a?(ActiveRecord::ConnectionNotEstablished)

        seen = seen&.cause
      end
      false
    end
  end
end
