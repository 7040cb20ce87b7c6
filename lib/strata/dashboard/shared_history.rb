# frozen_string_literal: true

require "json"
require "securerandom"
require "strata/errors"
require "strata/dashboard/history"

module Strata
  class Dashboard
    # The page's time series kept in the host's L1 table, shared by every process that serves
    # the page (the workers of an app, `strata dashboard`): whichever answers a poll shows the
    # same points. Points as History's (History::Points), CAPACITY of them, under reserved keys
    # (a NUL byte first: no cache key names one, Stack#keys lists none, the L1 counters leave
    # them out):
    #
    # - HEAD_KEY: {v:, epoch:, seq:, t:, totals:}, the last point's number (seq), its time and
    #   the running totals of the snapshot it was made from;
    # - point_key(seq), one of CAPACITY (seq modulo CAPACITY): {v:, epoch:, seq:, point:}.
    #
    # A process that took a snapshot appends a point when the head is at least interval old:
    # it reads the head with its CAS token, computes the point between the head's totals and
    # its own, and replaces the head (seq + 1) by compare-and-set; only the winner of that CAS
    # writes point seq + 1, so no point is written twice. A process that loses reads the head
    # again (ATTEMPTS times at most) and finds it recent. A snapshot older than the head's is
    # not appended (its totals would go back in time).
    #
    # Readers take the head, then the points of seq - CAPACITY + 1 .. seq, keeping those with
    # the head's epoch and the seq their key stands for. A head that is missing (evicted,
    # expired, never written), not understood, or more than CLOCK_SLACK ahead of a snapshot is
    # started afresh under a new random epoch, so the points left from before are no longer
    # read: the history restarts empty. Values stay under MAX_BYTES (their figures come from
    # the host counters' fixed layout; the memcached servers add one figure each); one that
    # would not is not written. Keeps nothing in the process: thread-safe.
    class SharedHistory
      HEAD_KEY = "\x00strata:dashboard:history".b.freeze
      POINT_PREFIX = "\x00strata:dashboard:history:".b.freeze
      FORMAT = 1 # the v: of both values; another is read as missing
      TTL = 86_400 # seconds the history outlives its last point
      MAX_BYTES = 16_384 # per value; L1's max_value_size is 64 KiB at least
      ATTEMPTS = 3
      # Seconds by which the head may be ahead of a snapshot's time (snapshots that took
      # long); further ahead, the host's clock went back and the history restarts.
      CLOCK_SLACK = 60.0

      def self.point_key(seq, capacity = History::CAPACITY)
        (POINT_PREFIX + (seq % capacity).to_s).b
      end

      # interval: seconds the head must be old for a point to be appended.
      def initialize(interval:, capacity: History::CAPACITY)
        @interval = interval
        @capacity = capacity
      end

      # Appends the point for snapshot, taken at time (epoch seconds), to the history in table
      # (a Tiers::SharedMemory), unless another process appended one less than interval ago.
      # True when this call appended a point. Never raises for the table's errors (a point not
      # appended is a gap).
      def record(table, snapshot, time)
        totals = History::Points.totals(snapshot)
        ATTEMPTS.times do
          bytes, token = table.get_with_cas(HEAD_KEY)
          head = bytes && decode(bytes)
          head = nil if head && head[:t] - time > CLOCK_SLACK
          unless head
            return false if restart(table, bytes, token, time, totals)

            next
          end
          return false if time <= head[:t] || time - head[:t] < @interval

          seq = head[:seq] + 1
          point = encode(epoch: head[:epoch], seq: seq, point: History::Points.point(time, head[:totals], totals))
          next_head = encode(epoch: head[:epoch], seq: seq, t: time, totals: totals)
          return false unless point && next_head
          next unless table.cas(HEAD_KEY, next_head, token, ttl: TTL)

          return table.set(point_key(seq), point, ttl: TTL)
        end
        false
      rescue Strata::Error
        false
      end

      # History::Points.series of the points in table, oldest first.
      def series(table)
        head = (bytes = table.get(HEAD_KEY)) && decode(bytes)
        return History::Points.series([]) unless head

        seqs = ([head[:seq] - @capacity + 1, 1].max..head[:seq]).to_a
        found = table.get_multi(seqs.map { |seq| point_key(seq) })
        points = seqs.filter_map do |seq|
          value = (bytes = found[point_key(seq)]) && decode(bytes)
          value[:point] if value && value[:epoch] == head[:epoch] && value[:seq] == seq
        end
        History::Points.series(points)
      end

      private

      def point_key(seq)
        self.class.point_key(seq, @capacity)
      end

      # A new head (seq 0: no point yet) in place of what bytes held (nothing: add; something
      # not understood: CAS on token). Truthy when written.
      def restart(table, bytes, token, time, totals)
        head = encode(epoch: SecureRandom.hex(8), seq: 0, t: time, totals: totals)
        return true unless head # too large to keep: nothing to retry

        bytes ? table.cas(HEAD_KEY, head, token, ttl: TTL) : table.add(HEAD_KEY, head, ttl: TTL)
      end

      # The JSON of value with the format's version, or nil over MAX_BYTES.
      def encode(value)
        json = JSON.generate({v: FORMAT}.merge(value))
        (json.bytesize <= MAX_BYTES) ? json : nil
      end

      # A head {epoch:, seq:, t:, totals:} or a point {epoch:, seq:, point:} from bytes, or nil
      # when they are neither.
      def decode(bytes)
        json = JSON.parse(bytes)
        return nil unless json.is_a?(Hash) && json["v"] == FORMAT && json["epoch"].is_a?(String) && json["seq"].is_a?(Integer)

        value = {epoch: json["epoch"], seq: json["seq"]}
        if json.key?("point")
          point = History::Points.restore_point(json["point"])
          point && value.merge(point: point)
        else
          totals = History::Points.restore_totals(json["totals"])
          (totals && json["t"].is_a?(Numeric)) ? value.merge(t: json["t"], totals: totals) : nil
        end
      rescue JSON::ParserError
        nil
      end
    end
  end
end
