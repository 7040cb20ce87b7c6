# frozen_string_literal: true

require_relative "cases"
require_relative "values"

module Strata
  module Bench
    # Drives one case against one store adapter: builds the keys, fills the store before timing,
    # checks the store returns what was written, and runs iterations of the case on demand.
    # It counts calls and block runs, so the report can show the hit ratio the store really gave.
    #
    # Each operation has its own tight loop so the harness adds the same few instructions to every
    # store; that matters most for ruby_hash, the floor.
    class Workload
      # The store gave back something other than what it was given.
      class WrongValue < StandardError; end

      # Keys that hit and set cases cycle through, unless the case sets its own (Case#keys). Powers
      # of two, so the index wraps with a mask. Small enough that every store keeps them beside the
      # miss traffic (256 x 25 KiB = 6.4 MiB).
      POOL = {Cases::SMALL => 1024, Cases::LARGE => 256}.freeze

      RUNNERS = {fetch: {1.0 => :fetch_hits, 0.5 => :fetch_half, 0.0 => :fetch_misses},
                 read_multi: :read_multis, write: :writes}.freeze

      # prefix keeps keys of different runs and stores apart on shared servers.
      def initialize(kase, store, prefix:)
        @kase = kase
        @store = store
        @value = Values.bytes(kase.value_size)
        pool = kase.keys || POOL.fetch(kase.value_size)
        # Keys are frozen, as normalised cache keys are: a Hash then keeps the key object instead of
        # interning a copy, which would charge the floor for work a real store does not make it do.
        @keys = Array.new(pool) { |i| "#{prefix}:#{kase.name}:k#{i}".freeze }.freeze
        @mask = pool - 1
        @slices = kase.batch ? @keys.each_slice(kase.batch).select { |s| s.size == kase.batch } : []
        @miss_prefix = "#{prefix}:#{kase.name}:m"
        @index = 0
        @seq = 0
        @calls = 0
        @misses = 0
        @found = 0
        @runner = pick_runner
      end

      # Writes the pool keys and checks that reads, read_multi and a fetch miss behave.
      # Raises WrongValue when they do not; nothing is timed.
      def prepare
        @keys.each { |key| @store.write(key, @value) }
        check_read_back
        check_fetch_miss
        check_read_multi if @kase.op == :read_multi
        self
      end

      # Runs `times` iterations of the case.
      def run(times)
        send(@runner, times)
        @calls += times
      end

      # The hit percentage the store gave so far (warmup included), or nil when hits do not apply.
      def observed_hit_pct
        return nil if @calls.zero? || @kase.hit_ratio.nil?

        if @kase.op == :read_multi
          100.0 * @found / (@calls * @kase.batch)
        else
          100.0 * (@calls - @misses) / @calls
        end
      end

      private

      def pick_runner
        runner = RUNNERS.fetch(@kase.op)
        runner.is_a?(Hash) ? runner.fetch(@kase.hit_ratio) : runner
      end

      def fetch_hits(times)
        store, keys, mask, value = @store, @keys, @mask, @value
        i = @index
        stop = i + times
        while i < stop
          store.fetch(keys[i & mask]) do
            @misses += 1
            value
          end
          i += 1
        end
        @index = i
      end

      # A fresh (frozen) key per call, so every call is a genuine miss on every store.
      def fetch_misses(times)
        store, prefix, value = @store, @miss_prefix, @value
        seq = @seq
        stop = seq + times
        while seq < stop
          seq += 1
          store.fetch("#{prefix}#{seq}".freeze) do
            @misses += 1
            value
          end
        end
        @seq = seq
      end

      # Odd calls take a fresh key, even calls a pool key: exactly half hit.
      def fetch_half(times)
        store, keys, mask, prefix, value = @store, @keys, @mask, @miss_prefix, @value
        i = @index
        stop = i + times
        while i < stop
          key = i.odd? ? "#{prefix}#{i}".freeze : keys[(i >> 1) & mask]
          store.fetch(key) do
            @misses += 1
            value
          end
          i += 1
        end
        @index = i
      end

      def read_multis(times)
        store, slices = @store, @slices
        i = @index
        stop = i + times
        while i < stop
          @found += store.read_multi(slices[i % slices.size]).size
          i += 1
        end
        @index = i
      end

      def writes(times)
        store, keys, mask, value = @store, @keys, @mask, @value
        i = @index
        stop = i + times
        while i < stop
          store.write(keys[i & mask], value)
          i += 1
        end
        @index = i
      end

      def check_read_back
        got = @store.read(@keys.first)
        raise WrongValue, "read after write returned #{show(got)}" unless got == @value
      end

      def check_fetch_miss
        ran = 0
        key = "#{@miss_prefix}probe"
        got = @store.fetch(key) do
          ran += 1
          @value
        end
        raise WrongValue, "fetch of an absent key ran its block #{ran} times" unless ran == 1
        raise WrongValue, "fetch of an absent key returned #{show(got)}" unless got == @value
        raise WrongValue, "read after a fetch miss returned #{show(@store.read(key))}" unless @store.read(key) == @value
      end

      def check_read_multi
        keys = @slices.first
        found = @store.read_multi(keys)
        return if found.size == keys.size && keys.all? { |key| found[key] == @value }

        raise WrongValue, "read_multi of #{keys.size} present keys gave #{found.size}, some wrong or missing"
      end

      def show(value)
        return value.inspect unless value.is_a?(String)

        "#{value.bytesize} bytes #{value.encoding} (expected #{@value.bytesize} bytes #{@value.encoding})"
      end
    end
  end
end
