# frozen_string_literal: true

require "digest/md5"
require "zlib"
require "strata/clock"
require "strata/errors"

module Strata
  module Meta
    # Decides which memcached server holds a key: ketama-style consistent hashing over weighted
    # servers, plus a record of servers marked down. It opens no sockets.
    #
    # Each server gets points_per_weight * weight points on a 32-bit circle. The points come from
    # MD5("host:port-i"), four little-endian 32-bit words per digest, so every process (and every
    # client built the same way) lays out the same circle: there is no seed. A key hashes to its
    # CRC-32 (a tenth of MD5's cost, and spread well enough for placing keys among points) and
    # belongs to the first point at or after it, wrapping at the top. With one server nothing is
    # hashed.
    # Adding or removing one of n servers moves about 1/n of the keys.
    #
    # Down servers: #mark_down records until when a server is skipped. Its keys are not rehashed
    # for good; #route sends them to a gutter, the next distinct up server clockwise, and says so,
    # so the caller stores them there with a short TTL. Once retry_after has passed, #route returns
    # the server again and the caller tries it (marking it down again if it still fails).
    #
    # When a server is marked down (the rule; Client applies it): at once when its connection is
    # refused, reset or closed, since such a server is gone; after down_after timeouts in a row
    # (#time_out), since one slow reply is more often a busy server or a long GC pause than an
    # outage, and an outage sends writes to a gutter whose copies the server never sees. A timeout
    # short of down_after fails only its own call. Any answer between two timeouts (#answered)
    # starts the count again.
    #
    # Health, for stats (#health): per server, the failures counted (each #mark_down, #time_out
    # short of down_after and #count_error, and each #route refused because no server was up, counted against the key's
    # own server), and since when it is down: the wall-clock time of the first #mark_down of an
    # outage, kept through its retries until #mark_up says the server answers again.
    #
    # The host's record (#watcher, a HostOutages or nil): told of each outage's first mark and
    # each mark again (#down(server, down since)), and of its end (#up(server)) when #mark_up
    # ends one, so that processes other than this one (`strata stats`) see it. Never on #route or
    # #up?: a server that is up costs nothing more. The watcher must not raise.
    #
    # Concurrency: the circle is immutable after #initialize; the down list and the health record
    # are guarded by a mutex, so one Ring may be shared by every thread of a process. With a
    # watcher, #mark_down and #mark_up also hold a second mutex, taken before the first, across
    # the change and the watcher's call, so that the watcher hears a server's transitions in the
    # order the ring made them.
    class Ring
      DEFAULTS = {
        # Points on the circle per unit of weight (ketama uses 160: 40 digests of 4 points each).
        points_per_weight: 160,
        # Seconds a server stays down after #mark_down when the caller gives no retry_after.
        retry_after: 1.0,
        # Timeouts in a row (no answer between them) that mark a server down; see Down servers.
        down_after: 2,
        # Returns the current time in seconds; monotonic so that clock changes can't revive or bury a
        # server. Tests inject their own.
        clock: -> { Clock.monotonic }
      }.freeze

      # Points per MD5 digest: 16 bytes read as four 32-bit words.
      POINTS_PER_DIGEST = 4

      # Server names ("host:port") in the order given.
      attr_reader :servers

      # servers: "host:port" or "host:port:weight" strings (weight a positive integer, default 1).
      # options: see DEFAULTS; keys it does not own are ignored.
      def initialize(servers, **options)
        own = DEFAULTS.merge(options.slice(*DEFAULTS.keys))
        @retry_after = own.fetch(:retry_after)
        @down_after = own.fetch(:down_after)
        unless @down_after.is_a?(Integer) && @down_after.positive?
          raise ArgumentError, "down_after must be a positive Integer, got #{@down_after.inspect}"
        end
        @clock = own.fetch(:clock)
        weights = parse(servers)
        @servers = weights.keys.freeze
        @points, @owners = build(weights, own.fetch(:points_per_weight))
        @only = (@servers.size == 1) ? @servers.first : nil
        @down_until = {}
        @down_since = {}
        @timeouts = {}
        @errors = @servers.to_h { |server| [server, 0] }
        @lock = Mutex.new
        @watcher = nil
        @watch_lock = Mutex.new
      end

      # What hears of outages (see The host's record): an object with down(server, since) and
      # up(server), or nil.
      attr_accessor :watcher

      # The server that holds key, whether or not it is up.
      def server_for(key)
        @owners[index_for(key)]
      end

      # [server, :primary] when the key's server is up, else [gutter, :gutter] where gutter is the
      # next distinct up server clockwise. Raises TierError when no server is up.
      def route(key)
        return [@only, :primary] if @only && up?(@only) # one server: nothing to hash

        index = index_for(key)
        primary = @owners[index]
        return [primary, :primary] if up?(primary)

        # bound: visits each point at most once
        (1...@points.size).each do |step|
          candidate = @owners[(index + step) % @points.size]
          return [candidate, :gutter] if candidate != primary && up?(candidate)
        end
        count_error(primary)
        raise TierError.new("no memcached server is up (#{@servers.join(", ")})", tier: :l2, server: primary)
      end

      # Skips server for retry_after seconds from now, and counts a failure. Marking it again
      # extends the wait; the outage goes on from the first mark (see Health).
      def mark_down(server, retry_after: @retry_after)
        check_server(server)
        watcher = @watcher
        if watcher
          @watch_lock.synchronize { watcher.down(server, begin_outage(server, retry_after)) }
        else
          begin_outage(server, retry_after)
        end
        nil
      end

      # Counts a timeout of server; the down_after-th in a row marks it down for retry_after
      # seconds (see Down servers). True when this one marked it down.
      def time_out(server, retry_after: @retry_after)
        check_server(server)
        short = @lock.synchronize do
          count = @timeouts[server] = @timeouts.fetch(server, 0) + 1
          @errors[server] += 1 if count < @down_after # mark_down counts the last one
          count < @down_after
        end
        return false if short

        mark_down(server, retry_after: retry_after)
        true
      end

      # server answered: its timeouts so far no longer count towards down_after.
      def answered(server)
        @lock.synchronize { @timeouts.delete(server) }
        nil
      end

      # True while some server has timeouts counted towards down_after.
      def timing_out?
        !@timeouts.empty?
      end

      # Ends server's outage: it answered again. Its keys route to it from now on.
      def mark_up(server)
        check_server(server)
        watcher = @watcher
        if watcher
          @watch_lock.synchronize { watcher.up(server) if end_outage(server) }
        else
          end_outage(server)
        end
        nil
      end

      # Counts a failure of server that does not make it down (it answered, but wrongly).
      def count_error(server)
        check_server(server)
        @lock.synchronize { @errors[server] += 1 }
        nil
      end

      # {errors: {server => failures counted}, down_since: {server => Time}} for the servers in an
      # outage (see Health).
      def health
        @lock.synchronize { {errors: @errors.dup, down_since: @down_since.dup} }
      end

      # False while server is marked down; true again once its retry_after has passed.
      def up?(server)
        return true if @down_until.empty? # the common case, without taking the lock

        @lock.synchronize do
          until_time = @down_until[server]
          return true unless until_time
          return false if @clock.call < until_time

          @down_until.delete(server)
          true
        end
      end

      private

      # #mark_down's change: the outage's start (a Time).
      def begin_outage(server, retry_after)
        until_time = @clock.call + retry_after
        @lock.synchronize do
          @down_until[server] = until_time
          @timeouts.delete(server)
          @errors[server] += 1
          @down_since[server] ||= Time.now
        end
      end

      # #mark_up's change: true when it ended an outage.
      def end_outage(server)
        @lock.synchronize do
          @down_until.delete(server)
          @timeouts.delete(server)
          !@down_since.delete(server).nil?
        end
      end

      def check_server(server)
        raise ArgumentError, "unknown server #{server.inspect}" unless @errors.key?(server)
      end

      # {"host:port" => weight}, in the order given.
      def parse(servers)
        raise ArgumentError, "a ring needs at least one server" if servers.empty?

        servers.each_with_object({}) do |spec, weights|
          host, port, weight = spec.split(":")
          raise ArgumentError, "server #{spec.inspect} is not host:port[:weight]" unless host && port

          name = "#{host}:#{Integer(port)}"
          raise ArgumentError, "server #{name} listed twice" if weights.key?(name)

          weight = weight ? Integer(weight) : 1
          raise ArgumentError, "server #{spec.inspect} needs a positive weight" unless weight.positive?

          weights[name] = weight
        end
      end

      # Sorted points and, at the same index, the server that owns each. Two servers that hash to
      # the same point: the one first in name order keeps it, so the outcome doesn't depend on the
      # order servers were listed.
      def build(weights, points_per_weight)
        pairs = []
        weights.each do |name, weight|
          digests = (points_per_weight * weight).fdiv(POINTS_PER_DIGEST).ceil
          digests.times do |i| # bound: points_per_weight * weight / 4 digests per server
            Digest::MD5.digest("#{name}-#{i}").unpack("V4").each { |point| pairs << [point, name] }
          end
        end
        pairs.sort!
        pairs.uniq!(&:first)
        [pairs.map(&:first).freeze, pairs.map(&:last).freeze]
      end

      # Index of the first point at or after the key's hash, wrapping to 0 past the last point.
      def index_for(key)
        hash = Zlib.crc32(key)
        @points.bsearch_index { |point| point >= hash } || 0
      end
    end
  end
end
