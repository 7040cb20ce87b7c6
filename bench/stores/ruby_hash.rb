# frozen_string_literal: true

require_relative "base"

module Strata
  module Bench
    module Stores
      # A plain Hash in this process: no serialization, no copy, no sharing. The practical floor.
      class RubyHash < Base
        NAME = "ruby_hash"

        # Miss cases add a fresh key per call; a bound keeps memory and GC marking flat over a long
        # run. The oldest insert goes first, so a hot key is dropped once per 64k misses and misses
        # once: under 1% of a half case's calls.
        MAX_ENTRIES = 1 << 16

        def initialize(env)
          super
          @data = {}
        end

        def read(key)
          @data[key]
        end

        def write(key, value)
          @data[key] = value
          @data.shift if @data.size > MAX_ENTRIES
        end

        def read_multi(keys)
          @data.slice(*keys)
        end
      end
    end
  end
end
