# frozen_string_literal: true

require_relative "../strata_loader"

module Strata
  module Bench
    # How long one memcached get takes when the server has been idle for a while before it: the
    # miss cost report's explanation of why a fill that follows SQLite work pays a slower round
    # trip than back-to-back requests do. Between two gets this process busy-waits the gap, so
    # only the server (and its CPU) sits idle. Our client, 30 B value, the first server.
    class IdleRoundTrip
      GAPS_US = [0, 100, 200].freeze
      # Timed gets per gap.
      CALLS = 2_000

      def initialize(env)
        @env = env
      end

      # {gap in µs => µs per get after it}; raises when the server can't be used.
      def run
        load_error = StrataLoader.load_error("strata/meta")
        raise load_error if load_error

        client = Strata::Meta::Client.new(servers: [@env.memcached_servers.first])
        key = "sb:#{@env.nonce}:idle-round-trip"
        client.set(key, "x" * 30, ttl: 300)
        GAPS_US.to_h { |gap| [gap, timed_gets(client, key, gap / 1e6)] }
      ensure
        client&.close
      end

      private

      def timed_gets(client, key, gap)
        total = 0.0
        CALLS.times do
          client.get(key)
          idle_until = now + gap
          nil while now < idle_until
          started = now
          client.get(key)
          total += now - started
        end
        total / CALLS * 1e6
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end
    end
  end
end
