# frozen_string_literal: true

require "strata/errors"
require "strata/resource_pool"
require "strata/meta/errors"
require "strata/meta/lease_flags"
require "strata/meta/request"
require "strata/meta/response"
require "strata/meta/connection"
require "strata/meta/pipeline"
require "strata/meta/recovery_log"
require "strata/meta/ring"
require "strata/meta/server_features"
require "securerandom"

module Strata
  module Meta
    # The public face of the meta-protocol client: one method per cache operation, on byte-string
    # keys and values. Request builds the bytes, Response parses the replies, Ring picks the server,
    # Connection moves the bytes; this class only strings them together. The multi-key operations
    # (get_multi, set_multi, delete_multi) and their pipelines are in Pipeline, included here.
    #
    # Routing and failure: every operation picks its server with Ring#route and then runs its
    # exchange through #dispatch, the one place that checks a connection out of the server's pool
    # and decides what a failure means. Every failure is raised to the caller, which fails open. A
    # refused, reset or closed connection marks the server down for retry_after seconds at once; a
    # timeout does so only when it is the server's down_after-th in a row (Ring's rule: one slow
    # reply fails only its own call). While it is down its keys route to a gutter server and writes
    # there get at most gutter_ttl. A server's answer that is an error (SERVER_ERROR, CLIENT_ERROR,
    # a reply out of step) is raised without marking the server down. After a SERVER_ERROR the
    # connection is kept: memcached read the whole command (an ms's value too) and answered it, so
    # the stream is in step; after the others it is closed. "object too large for cache" becomes
    # Strata::ValueTooLargeError; memcached 1.6.18 reads and drops such a value and removes any old
    # item under the key, so nothing is half-written and the key then misses. The client does the
    # same without sending the value when the server's item_size_max (from its probe) says it can't
    # fit. A multi-key reply that names no key of its pipeline (no opaque, or one out of range)
    # means the stream is out of step: the connection is closed and that server's keys miss. Every
    # TierError raised names its server (TierError#server), and #stats counts the failures per
    # server and says since when a server is down.
    #
    # Outages (no fault may lose a delete: docs/architecture.md, "Invariants"). A change of a
    # key (set, add, cas, lease_fill, delete, invalidate, incr, decr and their multi-key forms)
    # that its server did not answer, because the server was down (the change went to the
    # gutter, or was refused when no server was up) or the call failed on it (a timed-out
    # request may still be carried out when a stopped server runs again), is noted in this
    # process's RecoveryLog. Before this process's next exchange with that server, of any kind,
    # it deletes the noted keys there and then their gutter copies (as mcrouter does), and calls
    # to the server wait for that: a key read after an outage is the value written during it (in
    # the gutter, until gutter_ttl) or a miss, never the copy from before, and a deleted key
    # stays deleted. (One window is left: a stopped server that wakes just as the recovery
    # reaches it may carry out a timed-out request still buffered on an old connection after the
    # recovery's delete, which comes on another.) A delete or invalidate that reached only the
    # gutter deletes the gutter copy and raises TierError naming its server. A counter changed
    # during an outage starts again in the gutter (from initial) and lives there gutter_ttl at
    # most; on recovery the server's old counter is deleted too, so the count starts again
    # rather than resume from its value before the outage. When more than recovery_log_size keys
    # of one server are noted, this process can no longer say which of its copies are current:
    # recovery_overflow chooses between keeping the server down (its keys keep going to the
    # gutter, reported once, until #flush_server) and flushing it (flush_all) at recovery.
    # #clear of a server that is down (#flush) is likewise a flush at its recovery. The log is
    # this process's: another process or host that did not see the outage may read the server's
    # old copies (cross-host coherence is the invalidation log's job); a process that restarts
    # forgets its log. While a server has keys noted or timeouts counted, every call takes a
    # slower path (a lock or two); with all servers answering, the cost is one boolean check.
    #
    # Time bound: one operation on one server takes at most pool_timeout (waiting for a free
    # connection) + connect_timeout (when the connection must be made) + timeout (its exchange,
    # the server's feature probe included on first contact). A multi-key operation visits its
    # servers one after the other: up to that bound for each server it touches. A call that waited
    # for its connection checks the server again before using it, and fails at once if another
    # call marked it down meanwhile.
    #
    # TTLs are seconds (Integer or Float, rounded up; nil, 0 or infinite: no expiry; NaN raises
    # ArgumentError). memcached reads a TTL over 30 days as a unix time, so longer ones are sent as
    # now + ttl, and held until 2038-01-19 when they end later (see #server_ttl).
    #
    # Stale items (after #invalidate) and lease placeholders (after #lease_get won a miss) are
    # misses for #get, #get_with_cas and #get_multi. memcached hands the refill win of a stale item
    # to the first mg of any kind; when a plain read gets it, it hands it on (see give_up_win), so
    # that the next #lease_get wins the refill rather than wait out the grace.
    #
    # Concurrency: thread-safe. Each thread checks a Connection out of a per-server pool.
    # Fork: pools belong to the process that built them; a forked child that uses the client builds
    # its own (and Connection reconnects on a pid change), so parent and child never share a socket.
    class Client
      include Pipeline

      DEFAULTS = {
        # Connections per server in each process's pool.
        pool_size: 5,
        # Seconds to wait for a free pooled connection before raising RetryableError; this wait
        # comes before the other two (see Time bound).
        pool_timeout: 0.5,
        # Seconds for the TCP handshake with a server.
        connect_timeout: 0.5,
        # Seconds for one exchange with a server (every read and write of one operation).
        timeout: 0.5,
        # Seconds a server marked down is skipped (Ring's rule, with down_after: timeouts in a row
        # that mark it down); its keys go to a gutter meanwhile.
        retry_after: 1.0,
        # Seconds at most that a write routed to a gutter server lives there.
        gutter_ttl: 10,
        # Keys at most noted per server while it can't be told of their changes (see Outages).
        recovery_log_size: 10_000,
        # What recovers a server whose log overflowed: :stay_down keeps it down (its keys go to a
        # gutter) until #flush_server; :flush empties it (flush_all, every user's keys on it).
        recovery_overflow: :stay_down
      }.freeze

      # The values recovery_overflow takes.
      RECOVERY_OVERFLOWS = %i[stay_down flush].freeze

      # What #lease_get saw. value: the bytes to serve, or nil (a miss or a lease placeholder);
      # cas: the token #lease_fill must present; won: this caller should refill; stale: value was
      # invalidated (serve it only while someone refills); lease_sent: another caller holds the win.
      Lease = Struct.new(:value, :cas, :won, :stale, :lease_sent) do
        include LeaseFlags
      end

      # TTLs above this are unix times to memcached (its REALTIME_MAXDELTA).
      MAX_RELATIVE_TTL = 30 * 24 * 60 * 60
      # The last unix time a T token can name (2038-01-19 03:14:07 UTC).
      MAX_ABSOLUTE_TTL = Request::TTL_RANGE.max
      # flush_all is a text-protocol command with no meta form; it answers OK.
      FLUSH_ALL = "flush_all\r\n".b.freeze
      FLUSH_OK = "OK"
      TOO_LARGE = "object too large"
      MISS = "EN"
      # Errors in which the server answered: it is up, so it is not marked down.
      ANSWERED = [ServerError, ClientError, ProtocolError].freeze

      attr_reader :ring

      # What counts this client's gutter traffic and recoveries, or nil: an object with
      # gutter_read(n), gutter_wrote(n), gutter_deleted(n) (requests for keys whose server was
      # down, sent to a gutter; and the deletes of their gutter copies at its recovery),
      # recovery_deleted(n) (keys of a recovery log deleted on the recovered server) and
      # recovery_flushed (a server flushed at its recovery); the memcached tier gives it its
      # Strata::Counters::Row. Every key counts, the stack's own included.
      attr_accessor :counts

      # servers: "host:port[:weight]" strings. options: see DEFAULTS; Ring and Connection take
      # their own keys (points_per_weight, clock) from the same hash.
      def initialize(servers:, **options)
        own = DEFAULTS.merge(options.slice(*DEFAULTS.keys))
        @pool_size = own.fetch(:pool_size)
        @pool_timeout = own.fetch(:pool_timeout)
        @retry_after = own.fetch(:retry_after)
        @gutter_ttl = own.fetch(:gutter_ttl)
        @recovery_log_size = own.fetch(:recovery_log_size)
        unless @recovery_log_size.is_a?(Integer) && @recovery_log_size.positive?
          raise ArgumentError, "recovery_log_size must be a positive Integer, got #{@recovery_log_size.inspect}"
        end
        overflow = own.fetch(:recovery_overflow)
        unless RECOVERY_OVERFLOWS.include?(overflow)
          raise ArgumentError, "recovery_overflow must be one of #{RECOVERY_OVERFLOWS.inspect}, got #{overflow.inspect}"
        end
        @ring = Ring.new(servers, **options.slice(*Ring::DEFAULTS.keys).merge(retry_after: @retry_after))
        connection_options = {connect_timeout: own.fetch(:connect_timeout), timeout: own.fetch(:timeout)}
        Connection.check_options(connection_options)
        @pools = @ring.servers.to_h do |server|
          host, port = server.split(":")
          [server, ResourcePool.new(size: @pool_size, timeout: @pool_timeout) { Connection.new(host, port, **connection_options) }]
        end.freeze
        @features = {}
        @log = RecoveryLog.new(@ring.servers, limit: @recovery_log_size, overflow: overflow)
        # Guards @log and @attention; taken before Ring's lock, never after.
        @attention_lock = Mutex.new
        # One per server, held while that server is recovered; taken before @attention_lock.
        @recovery_locks = @ring.servers.to_h { |server| [server, Mutex.new] }.freeze
        # True while some server has keys noted or timeouts counted: #dispatch takes its slow path.
        @attention = false
        @counts = nil
      end

      # The bytes under key, or nil.
      def get(key)
        server, role = @ring.route(key)
        @counts&.gutter_read(1) if role == :gutter
        dispatch(server) do |c|
          c.write(Request.mg_value(key))
          read_plain_value(c, key)
        end
      end

      # [bytes, cas] or nil.
      def get_with_cas(key)
        server, role = @ring.route(key)
        @counts&.gutter_read(1) if role == :gutter
        dispatch(server) do |c|
          c.write(Request.mg(key, flags: false))
          value, result = read_value(c, key)
          value && [value, result.cas]
        end
      end

      # Stores value. True when stored. token: true answers a write token instead of true: the
      # CAS the item got, which #cas_of compares later without reading the value back. A server
      # with E (ServerFeatures#explicit_cas) is given a random one; 1.6.18 says its own (c).
      def set(key, value, ttl: nil, token: false)
        store(key, value, ttl, mode: nil, cas: nil, token: token)
      end

      # The CAS of key's item, or nil when it is absent or stale: one mg without the value. The
      # refill win of a stale item it is handed goes on, as a plain read's does (give_up_win).
      def cas_of(key)
        server, role = @ring.route(key)
        @counts&.gutter_read(1) if role == :gutter
        dispatch(server) do |c|
          c.write(Request.mg(key, value: false, flags: false))
          result = Response.parse(c.read_line, :mg)
          give_up_win(c, [key]) if result.stale? && result.won?
          result.cas if result.status == :hit && !result.stale?
        end
      end

      # Stores value only if key is absent. True when stored.
      def add(key, value, ttl: nil)
        store(key, value, ttl, mode: :add, cas: nil)
      end

      # Stores value only if key still has the cas token. True when stored; false when the item
      # changed (EX) or is gone (NF).
      def cas(key, value, token, ttl: nil)
        store(key, value, ttl, mode: nil, cas: token)
      end

      # Removes key. True if it was there. When key's server is down, deletes the gutter's copy,
      # notes key (see Outages) and raises TierError naming the server.
      def delete(key)
        server, role = @ring.route(key)
        gutter_delete(key, server) if role == :gutter
        deleted = dispatch(server) do |c|
          c.write(Request.md(key))
          Response.parse(c.read_line, :md).status == :hit
        end
        return deleted if role == :primary

        raise unreached(key, server)
      rescue TierError => e
        note(e.server, key, nil) if e.server
        raise
      end

      # Marks key stale for grace_ttl seconds and bumps its CAS: the next mg gets the value with X
      # and W (it refills), later ones X and Z. True if the key was there. On a server without
      # md I (see ServerFeatures) the key is deleted instead. A server that is down: as #delete.
      def invalidate(key, grace_ttl:)
        server, role = @ring.route(key)
        gutter_delete(key, server) if role == :gutter
        found = dispatch(server) do |c, features|
          c.write(features.stale ? Request.md(key, invalidate: true, ttl: server_ttl(grace_ttl, role)) : Request.md(key))
          Response.parse(c.read_line, :md).status == :hit
        end
        return found if role == :primary

        raise unreached(key, server)
      rescue TierError => e
        note(e.server, key, nil) if e.server
        raise
      end

      # Adds amount; the new value. When key is absent: nil, or with initial: creates it holding
      # initial (ttl applies only then) and returns initial. While key's server is down the
      # counter lives in the gutter, starting again from initial (see Outages).
      def incr(key, amount = 1, ttl: nil, initial: nil)
        arithmetic(key, amount, :incr, ttl, initial)
      end

      # Subtracts amount, stopping at 0; otherwise like #incr.
      def decr(key, amount = 1, ttl: nil, initial: nil)
        arithmetic(key, amount, :decr, ttl, initial)
      end

      # Reads key for read-through (mg v c N<lease_ttl>). On a miss the server creates an empty
      # placeholder for lease_ttl seconds and the first caller wins; see Lease. A server without
      # leases (see ServerFeatures) gets a plain mg v c, and every caller that misses wins, with no
      # cas: its #lease_fill is then a plain set.
      def lease_get(key, lease_ttl:)
        server, role = @ring.route(key)
        @counts&.gutter_read(1) if role == :gutter
        dispatch(server) do |c, features|
          leases = features.leases
          c.write(Request.mg_lease(key, leases ? server_ttl(lease_ttl, role) : nil))
          line = c.read_line
          length, cas = Response.fresh_value(line)
          next Lease.new(c.read_bytes(length), cas, false, false, false) if length

          result = Response.parse(line, :mg)
          value = result.value? ? c.read_bytes(result.value_length) : nil
          # W or Z without X comes only from a placeholder (we never send R): nothing to serve.
          value = nil if !result.stale? && (result.won? || result.lease_sent?)
          won = result.won? || (!leases && result.status == :miss) # no leases: every reader that misses fills
          Lease.new(value, result.cas, won, result.stale?, result.lease_sent?)
        end
      end

      # Fills key after a won lease: ms C<cas>. The fill is the commit point of a read-through:
      # true only when it stored a fresh value. False when the item's CAS moved on since the lease
      # (an #invalidate or another write came in between: the fill was computed from data that is
      # no longer current, so it is dropped and the next reader wins a refill) or the item is gone.
      def lease_fill(key, value, cas, ttl: nil)
        store(key, value, ttl, mode: nil, cas: cas)
      end

      # Empties every server that is up (flush_all); one that is down is flushed at its recovery
      # (see Outages). For tests and #clear.
      def flush
        @ring.servers.each do |server| # bound: one pass per server
          unless @ring.up?(server)
            @attention_lock.synchronize do
              next if @log.overflow(server) == :held # flushed when an operator lets it back

              @log.flush(server)
              @attention = true
            end
            next
          end

          dispatch(server) { |c| flush_all(c) }
        end
        true
      end

      # An operator's remedy for server, kept down since its recovery log overflowed
      # (recovery_overflow: :stay_down): routes its keys to it again, and this process's next use
      # of it flushes it first (flush_all: every key of every user of that server).
      def flush_server(server)
        raise ArgumentError, "unknown server #{server.inspect}" unless @pools.key?(server)

        @attention_lock.synchronize do
          @log.flush(server)
          @attention = true
        end
        @ring.mark_up(server)
        nil
      end

      # What server answered to the feature probe (ServerFeatures), probing it now if it has not
      # been asked yet. Raises TierError when it can't be reached.
      def features(server)
        dispatch(server) { |_c, features| features }
      end

      # servers: how many are configured; down: how many are skipped now; errors: failures counted
      # per server ("host:port" => n, see Ring's Health); down_since: when the outage of each
      # server in one began ("host:port" => Time), kept through its retries until it answers;
      # recovery: per server with changes it has not been told of, how many keys are noted, or
      # :overflowed (see Outages).
      def stats
        health = @ring.health
        {servers: @ring.servers.size, down: @ring.servers.count { |server| !@ring.up?(server) },
         errors: health[:errors], down_since: health[:down_since],
         recovery: @attention_lock.synchronize { @log.sizes }}
      end

      # Closes this process's connections; the client reconnects on next use.
      def close
        @pools.each_value { |pool| pool.shutdown(&:close) }
        nil
      end

      private

      # The one place a failure is judged (see the class comment). Checks a connection out of the
      # server's pool and runs #exchange on it; yields the connection and the server's
      # ServerFeatures, as read once for this call (another thread may forget them meanwhile).
      # Every TierError it raises names the server (TierError#server). While @attention is up
      # the call goes through #attend (attended: true skips that, for #attend's own calls).
      def dispatch(server, attended = false, &block)
        return attend(server, &block) if @attention && !attended

        features = @features[server]
        result = @pools.fetch(server).with do |conn|
          # Another call may have found the server down since this one chose it (while it waited
          # for conn, say): then it is not tried again, and counts as refused like Ring#route's.
          unless @ring.up?(server)
            @ring.count_error(server)
            raise TierError.new("#{server} was marked down after this call chose it", tier: :l2, server: server)
          end

          exchange(server, conn, features, &block)
        end
        return result unless result.is_a?(ServerError)

        raise ValueTooLargeError, "#{server}: #{result.message}" if result.message.include?(TOO_LARGE)

        @ring.count_error(server)
        raise ServerError.new("#{server}: #{result.message}", tier: :l2, server: server)
      rescue ResourcePool::TimeoutError
        @ring.count_error(server)
        raise RetryableError.new("#{server}: no free connection after #{@pool_timeout}s", tier: :l2, server: server)
      end

      # One request on conn, under one deadline: the feature probe first when the server has not
      # answered one (#probe), then the caller's block. A SERVER_ERROR is returned, not raised: the
      # server read the whole command and answered, so the stream is in step and the connection
      # goes back to the pool (a pipeline reads on to its MN before it raises one). Any other
      # failure closes the connection (Connection#request); one of the connection itself marks
      # the server down before the connection goes back, so a thread waiting for it sees that.
      def exchange(server, conn, features)
        conn.request do |c|
          features = probe(server, c) unless features&.meta
          yield c, features
        rescue ServerError => e
          e
        end
      rescue *ANSWERED => e
        @ring.count_error(server)
        raise with_server(e, server)
      rescue RetryableError
        timed_out(server)
        raise
      rescue TierError
        @ring.mark_down(server, retry_after: @retry_after)
        @features.delete(server) # ask again once it is back: it may be another server by then
        raise
      end

      # A timeout (connecting or exchanging): marks server down only when it is the down_after-th
      # in a row (Ring#time_out); until an answer, calls take #attend's path to count answers.
      def timed_out(server)
        marked = @attention_lock.synchronize do
          @attention = true
          @ring.time_out(server, retry_after: @retry_after)
        end
        @features.delete(server) if marked
      end

      # #dispatch while some server has keys noted or timeouts counted: recovers server first
      # (#recover), runs the call, then tells the ring that server answered.
      def attend(server, &block)
        recover(server)
        result = dispatch(server, true, &block)
        @attention_lock.synchronize do
          @ring.answered(server)
          @attention = @ring.timing_out? || @log.any?
        end
        result
      end

      # Carries out what this process owes server (RecoveryLog, see Outages) before anything
      # else uses it: deletes the noted keys there (one quiet pipeline), then their gutter
      # copies; after an overflow, flushes it or keeps it down (recovery_overflow). Every call
      # recovers the server before its own exchange, so none reads from it first; the recovery
      # lock makes concurrent calls wait for one recovery rather than each send the deletes. When
      # the server fails, the keys stay noted and the error is raised to the call that came to
      # recover it.
      def recover(server)
        return unless @attention_lock.synchronize { @log.pending?(server) }

        @recovery_locks.fetch(server).synchronize do
          taken, overflow = @attention_lock.synchronize { [@log.take(server), @log.overflow(server)] }
          case overflow
          when :stay_down then hold(server)
          when :flush then dispatch(server, true) { |c| flush_all(c) }
          when nil
            return if taken.empty? # another call recovered it while this one waited

            keys = taken.keys
            dispatch(server, true) { |c| quiet_deletes(c, keys) }
            @counts&.recovery_deleted(keys.size)
          end
          @counts&.recovery_flushed if overflow == :flush
          @attention_lock.synchronize { @log.done(server, taken, flushed: overflow == :flush) }
          forget_gutter_copies(taken)
        end
      end

      # Deletes the gutter copies of recovered keys ({key => [gutter]}). A gutter that fails
      # keeps them noted for its own recovery.
      def forget_gutter_copies(taken)
        taken.group_by { |_key, (gutter)| gutter }.each do |gutter, pairs| # bound: one pass per gutter
          next unless gutter

          keys = pairs.map(&:first)
          begin
            raise TierError.new("#{gutter} is down", tier: :l2, server: gutter) unless @ring.up?(gutter)

            dispatch(gutter, true) { |c| quiet_deletes(c, keys) }
            @counts&.gutter_deleted(keys.size)
          rescue TierError
            keys.each { |key| note(gutter, key, nil) }
          end
        end
      end

      # server's log overflowed and recovery_overflow is :stay_down: keeps it down until
      # #flush_server and raises the one report of it.
      def hold(server)
        @ring.mark_down(server, retry_after: Float::INFINITY)
        @attention_lock.synchronize { @log.hold(server) }
        raise TierError.new("#{server}: more than #{@recovery_log_size} keys changed while it could not be told, " \
          "so its copies can't be trusted: it stays down (its keys go to a gutter) until flush_server",
          tier: :l2, server: server)
      end

      # A write of key (a store or a counter's change), whose server is down, sent to gutter:
      # counted, and key noted under its server (see Outages).
      def gutter_write(key, gutter)
        @counts&.gutter_wrote(1)
        note(@ring.server_for(key), key, gutter)
      end

      # A delete or invalidate of key, whose server is down, sent to gutter: counted, and key
      # noted under its server (see Outages).
      def gutter_delete(key, gutter)
        @counts&.gutter_deleted(1)
        note(@ring.server_for(key), key, gutter)
      end

      # Notes key under server: changed while server could not be told (see Outages).
      def note(server, key, gutter)
        @attention_lock.synchronize do
          @log.note(server, key, gutter)
          @attention = true
        end
        nil
      end

      # The error of a delete of key that reached only the gutter.
      def unreached(key, gutter)
        server = @ring.server_for(key)
        TierError.new("#{server} is down: #{key.inspect} was deleted on the gutter #{gutter} only, and is deleted on " \
          "#{server} when it answers again", tier: :l2, server: server)
      end

      # Ring#route of key for a multi-key change of all_keys: when no server is up, nothing of it
      # is sent, and every key is noted under its server (see Outages) before the refusal is raised.
      def routed(key, all_keys)
        @ring.route(key)
      rescue TierError
        all_keys.each { |each_key| note(@ring.server_for(each_key), each_key, nil) }
        raise
      end

      def flush_all(conn)
        conn.write(FLUSH_ALL)
        line = conn.read_line
        raise ProtocolError, "flush_all answered #{line.inspect}" unless line == FLUSH_OK
      end

      # Learns what server can do (ServerFeatures), on conn inside its request. A server that
      # answers ends its outage (Ring#mark_up). One without the meta protocol raises TierError, so
      # it is marked down like an unreachable one and its keys go to a gutter.
      def probe(server, conn)
        features = ServerFeatures.probe(conn, "strata:probe:#{SecureRandom.hex(8)}")
        @features[server] = features
        unless features.meta
          raise TierError.new("#{server} runs memcached #{features.version} without the meta protocol; " \
            "Strata needs memcached 1.6 or later", tier: :l2, server: server)
        end
        @ring.mark_up(server)
        features
      end

      # error (raised by Response, which knows no server) again, naming server.
      def with_server(error, server)
        named = error.class.new("#{server}: #{error.message}", tier: :l2, server: server)
        named.set_backtrace(error.backtrace)
        named
      end

      # Reads one mg reply: [bytes or nil, result]. Stale items and placeholders are misses.
      # The value of a plain mg (no flags asked for): the reply is "EN" or "VA <n>" unless the
      # item is stale or a lease placeholder, which the full parse turns into a miss.
      def read_plain_value(conn, key)
        line = conn.read_line
        return nil if line == MISS
        length = Response.plain_value_length(line)
        return conn.read_bytes(length) if length

        read_value(conn, key, line).first
      end

      # The reply to a plain mg of key: [bytes or nil, result].
      def read_value(conn, key, line = conn.read_line)
        result = Response.parse(line, :mg)
        return [nil, result] unless result.value?

        value = conn.read_bytes(result.value_length)
        give_up_win(conn, [key]) if result.stale? && result.won?
        return [nil, result] if result.stale? || result.won? || result.lease_sent?

        [value, result]
      end

      # An ms of key. A value over the server's item size limit (from the probe, see
      # ITEM_OVERHEAD) is not sent: the key is deleted instead, as memcached does when it refuses
      # one (but for an add, which would not have replaced it), and ValueTooLargeError is raised.
      def store(key, value, ttl, mode:, cas:, token: false)
        raise ArgumentError, "value must be a String, got #{value.class}" unless value.is_a?(String)

        server, role = @ring.route(key)
        gutter_write(key, server) if role == :gutter
        header = if token
          nil # needs the server's features: built in the exchange
        elsif mode.nil? && cas.nil?
          Request.ms_value(key, value.bytesize, server_ttl(ttl, role))
        else
          Request.ms_header(key, value.bytesize, ttl: server_ttl(ttl, role), mode: mode, cas: cas)
        end
        stored = dispatch(server) do |c, features|
          limit = features.item_size_max
          next too_large(c, key, mode) if limit && key.bytesize + value.bytesize + ITEM_OVERHEAD > limit
          next store_with_token(c, features, key, value, server_ttl(ttl, role), mode, cas) if token

          c.write(header, value, Request::CRLF)
          Response.status(c.read_line, :ms) == :hit
        end
        return stored unless stored.nil?

        raise ValueTooLargeError, "#{server}: value of #{value.bytesize} bytes for #{key.inspect} is over the " \
          "server's item size limit: not stored#{", old copy deleted" unless mode == :add}"
      rescue TierError => e
        note(e.server, key, nil) if e.server
        raise
      end

      # #store's exchange when the caller wants a write token (#set): the CAS the item got when
      # stored (an Integer; true when the server named none), else false.
      def store_with_token(conn, features, key, value, ttl, mode, cas)
        new_cas = Request.new_cas if features.explicit_cas
        conn.write(Request.ms_header(key, value.bytesize, ttl: ttl, mode: mode, cas: cas, new_cas: new_cas,
          return_cas: new_cas.nil?), value, Request::CRLF)
        result = Response.parse(conn.read_line, :ms)
        result.status == :hit && (new_cas || result.cas || true)
      end

      # The refusal of a value too large for the server's items (see #store): nil.
      def too_large(conn, key, mode)
        return nil if mode == :add

        conn.write(Request.md(key))
        Response.parse(conn.read_line, :md)
        nil
      end

      def arithmetic(key, amount, mode, ttl, initial)
        server, role = @ring.route(key)
        gutter_write(key, server) if role == :gutter
        vivify = initial.nil? ? nil : server_ttl(ttl, role)
        request = Request.ma(key, delta: amount, mode: mode, vivify_ttl: vivify, initial: initial)
        dispatch(server) do |c|
          c.write(request)
          result = Response.parse(c.read_line, :ma)
          next nil unless result.value?

          Response.counter_value(c.read_bytes(result.value_length))
        end
      rescue TierError => e
        note(e.server, key, nil) if e.server
        raise
      end

      # The T token for ttl seconds: rounded up, capped at gutter_ttl on a gutter, an absolute time
      # past 30 days. memcached holds an absolute time as a signed 32-bit unix time, so one past
      # 2038-01-19 is held until then (the Strata entry header still says when the value
      # expires). An infinite ttl never expires; NaN raises ArgumentError.
      def server_ttl(ttl, role)
        return 0 if (ttl.nil? || ttl.zero?) && role == :primary

        seconds = if ttl.nil? || ttl.zero? then 0
        elsif ttl.negative? then -1 # expires at once, as memcached reads any negative TTL
        elsif ttl.finite? then ttl.ceil
        elsif ttl.nan? then raise ArgumentError, "ttl must be a number of seconds, got NaN"
        else 0 # infinite
        end
        seconds = @gutter_ttl if role == :gutter && (seconds.zero? || seconds > @gutter_ttl)
        return seconds if seconds <= MAX_RELATIVE_TTL

        at = Time.now.to_i + seconds
        (at > MAX_ABSOLUTE_TTL) ? MAX_ABSOLUTE_TTL : at
      end
    end
  end
end
