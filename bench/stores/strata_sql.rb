# frozen_string_literal: true

require_relative "base"
require_relative "../strata_loader"

module Strata
  module Bench
    module Stores
      # Strata::Tiers::SQL (L3) used directly on an embedded SQLite file: bytes in, bytes out, no
      # Rails, no entry header, the tier's default limits (max_size 256 MiB, an expiry pass every 50
      # writes). Each instance opens a fresh database file in the run's private directory and
      # removes it, with its -wal and -shm files, on close. Set beside solid_cache, the other SQL
      # cache on the same SQLite build.
      class StrataSQL < Base
        NAME = "strata_sql"

        FEATURE = "strata/tiers/sql"

        def self.unavailable_reason(env)
          StrataLoader.load_error(FEATURE) ||
            StrataLoader.probe_error("an SQL tier round trip on SQLite") { smoke_test(env) }
        end

        attr_reader :tier

        def initialize(env)
          super
          @path = env.disk_path(NAME, ext: "sqlite3")
          @tier = Strata::Tiers::SQL.new(path: @path)
        end

        def read(key)
          @tier.get(key)
        end

        def write(key, value)
          @tier.set(key, value)
        end

        def read_multi(keys)
          @tier.get_multi(keys)
        end

        def close
          @tier.close
          @env.remove_table(@path)
        end
      end
    end
  end
end
