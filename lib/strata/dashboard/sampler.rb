# frozen_string_literal: true

require "json"
require "socket"
require "active_support"
require "active_support/notifications"
require "strata/clock"
require "strata/errors"
require "strata/dashboard/top_k"
require "strata/dashboard/samples"

module Strata
  class Dashboard
    # In an app process: one in +every+ of a store's cache_read (misses), cache_generate (fill
    # time) and invalidate.strata (tags) events, counted by key or tag in bounded top-k lists,
    # and published at most once a second to the host's L1 table under a reserved key, where a
    # dashboard in any process on the host reads every process's sample back (Samples).
    #
    #   Strata::Dashboard::Sampler.start(Rails.cache, every: 10)
    #
    # Subscribing to those events costs the store its unobserved fast path (Fetch, UnobservedReads):
    # every read then builds its event payload, sampled or not. Keys are kept cut to KEY_BYTES,
    # head and tail (keys that share those bytes count as one). Thread-safe: the lists are updated under a lock,
    # taken only for sampled events. A forked child starts its sample afresh.
    class Sampler
      EVENTS = {read: "cache_read.active_support", generate: "cache_generate.active_support",
                invalidate: "invalidate.strata"}.freeze
      DEFAULT_EVERY = 10
      # Names kept per list; the page shows the first Samples::TOP of the sum over processes.
      CAPACITY = 64
      KEY_BYTES = 64
      PUBLISH_INTERVAL = 1.0 # seconds between publications, at least

      # Subscribes a sampler to store's events and returns it (#stop unsubscribes).
      def self.start(store, every: DEFAULT_EVERY)
        new(table: store.stack[:l1], store_name: store.class.name, every: every).tap(&:subscribe)
      end

      # table: the L1 tier to publish to (nil: kept in this process only). store_name: the
      # events' payload[:store] to count. every: sample one event in this many. clock: callable
      # returning monotonic seconds.
      def initialize(table:, store_name:, every: DEFAULT_EVERY, clock: Clock.method(:monotonic))
        raise ArgumentError, "every must be a positive Integer, got #{every.inspect}" unless every.is_a?(Integer) && every.positive?

        @table = table
        @store_name = store_name
        @every = every
        @clock = clock
        @lock = Mutex.new
        @publishing = Mutex.new
        @lists = {misses: TopK.new(CAPACITY), fill_time: TopK.new(CAPACITY), invalidations: TopK.new(CAPACITY)}
        @seen = 0
        @pid = Process.pid
        @published_at = nil
        @slot = nil
        @subscriptions = []
      end

      def subscribe
        @subscriptions = EVENTS.map do |kind, name|
          ActiveSupport::Notifications.monotonic_subscribe(name) do |_name, start, finish, _id, payload|
            record(kind, payload, finish - start)
          end
        end
        self
      end

      def stop
        @subscriptions.each { |subscriber| ActiveSupport::Notifications.unsubscribe(subscriber) }
        @subscriptions = []
        nil
      end

      # Counts one event when it is the one in every to sample; then publishes if due.
      # seconds: the event's duration (a fill's time for :generate).
      def record(kind, payload, seconds)
        return unless payload[:store] == @store_name

        # A lost increment between threads only shifts which event is sampled.
        @seen += 1
        return unless (@seen % @every).zero?

        @lock.synchronize do
          restart_after_fork
          case kind
          when :read then @lists[:misses].add(cut(payload[:key])) unless payload[:hit]
          when :generate then @lists[:fill_time].add(cut(payload[:key]), (seconds * 1_000_000).round)
          when :invalidate then Array(payload[:tags]).each { |tag| @lists[:invalidations].add(cut(tag)) }
          end
        end
        publish_if_due
      end

      # This process's sample: {pid:, host:, pid_ns: (Samples.pid_namespace), every:, misses:
      # [[key, count, count], ...], fill_time: [[key, microseconds, fills], ...], invalidations:
      # [[tag, count, count], ...]}.
      def sample
        @lock.synchronize do
          restart_after_fork
          {pid: Process.pid, host: Socket.gethostname, pid_ns: Samples.pid_namespace, every: @every}.merge(@lists.transform_values(&:top))
        end
      end

      # Writes the sample to the table under this process's slot (Samples): the one it held,
      # while no other process has taken it since it lapsed, else the first free one from a
      # place given by the pid. False when the table holds no free slot or refused the write.
      def publish
        @publishing.synchronize { publish! }
      end

      private

      # Publishes when a second has passed since the last time, unless another thread is
      # publishing right now.
      def publish_if_due
        return unless @publishing.try_lock

        begin
          publish! if @published_at.nil? || @clock.call - @published_at >= PUBLISH_INTERVAL
        ensure
          @publishing.unlock
        end
      end

      def publish!
        @published_at = @clock.call
        return false unless @table

        bytes = JSON.generate(sample)
        @slot = nil if @slot && !own_slot?(@slot)
        return @table.set(Samples.slot_key(@slot), bytes, ttl: Samples::TTL) if @slot

        @slot = Samples.free_slot(Process.pid) { |slot| @table.add(Samples.slot_key(slot), bytes, ttl: Samples::TTL) }
        !@slot.nil?
      rescue Strata::Error => e # a publication that fails is only a missed second
        ActiveSupport.error_reporter&.report(e, handled: true, source: "strata.dashboard")
        false
      end

      def own_slot?(slot)
        bytes = @table.get(Samples.slot_key(slot))
        bytes.nil? || Samples.parse(bytes)&.dig("pid") == Process.pid
      end

      def restart_after_fork
        return if @pid == Process.pid

        @pid = Process.pid
        @lists.each_value(&:clear)
        @slot = nil
      end

      # name within KEY_BYTES: a longer one keeps its head and its tail (where Rails' fragment
      # keys end with the record ids), "..." between.
      def cut(name)
        name = name.to_s
        return name.dup.force_encoding(Encoding::UTF_8).scrub("?") if name.bytesize <= KEY_BYTES

        head = KEY_BYTES / 2
        "#{name.byteslice(0, head)}...#{name.byteslice(name.bytesize - (KEY_BYTES - head - 3), KEY_BYTES - head - 3)}"
          .force_encoding(Encoding::UTF_8).scrub("?")
      end
    end
  end
end
