# frozen_string_literal: true

require_relative "base"
require_relative "../strata_loader"

module Strata
  module Bench
    module Stores
      # Strata::Tiers::SharedMemory used directly: bytes in, bytes out, no Rails, no entry header.
      # Each instance maps a fresh table file in the run's private directory.
      class StrataL1 < Base
        NAME = "strata_l1"

        # Holds every case's key pool, the 50 MiB one of the large cases included; miss cases still
        # wrap the log and evict, as a full table does in production.
        TABLE_BYTES = 128 * 1024 * 1024

        def self.unavailable_reason(env)
          StrataLoader.load_error("strata") ||
            StrataLoader.probe_error("opening a #{TABLE_BYTES >> 20} MiB table") { smoke_test(env) }
        end

        attr_reader :table, :path

        def initialize(env, size: TABLE_BYTES)
          super(env)
          @path = env.table_path(NAME)
          @table = Strata::Tiers::SharedMemory.new(path: @path, size: size)
        end

        def read(key)
          @table.get(key)
        end

        def write(key, value)
          @table.set(key, value)
        end

        def read_multi(keys)
          @table.get_multi(keys)
        end

        def close
          @table.close
          @env.remove_table(@path)
        end
      end
    end
  end
end
