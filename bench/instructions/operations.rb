# frozen_string_literal: true

require "securerandom"

module Strata
  module Bench
    module Instructions
      # The operations the instruction-count gate measures, each one call on a warm store with a
      # 30 B value: the L1 tier's get and set, the memcached client's get and set, and a
      # StrataStore#fetch hit through each tier layout, and a StrataStore write and miss over L1. An operation opens what it needs in a
      # Bench::Environment and answers #call (one operation) and #close (removes what it made).
      #
      # The stores run without their timed background work: the poller and the coherence lapse
      # are set to an hour, so a run that callgrind slows fifty-fold counts the same calls as a
      # native one. The keys carry the environment's nonce (a fixed length, so the counts don't
      # move with it); memcached's first server serves them all, as in bin/bench.
      module Operations
        VALUE = ("v" * 30).b.freeze

        # Timed work the gate keeps out of the count (seconds): longer than any run.
        QUIET = {poll_interval: 3600, coherence_interval: 3600}.freeze

        # One measured call: #call runs it, #close releases what #initialize opened.
        class Operation
          def initialize(env, name)
            @env = env
            @key = "strata-instructions:#{env.nonce}:#{name}"
            @paths = []
          end

          # Deletes the key (memcached keeps it otherwise), closes the store, removes its files.
          def close
            @target&.delete(@key)
            @target&.close
            @paths.each { |path| @env.remove_table(path) }
          end

          private

          def l1_options
            {path: owned(@env.table_path("l1")), size: 8 << 20}
          end

          def sql_options
            {path: owned(@env.disk_path("sql", ext: "sqlite3"))}
          end

          def memcached_options
            {servers: [@env.memcached_servers.first]}
          end

          def owned(path)
            (@paths << path).last
          end
        end

        # Strata::Tiers::SharedMemory#get of a present key.
        class L1Get < Operation
          def initialize(env, name)
            super
            @target = Strata::Tiers::SharedMemory.new(**l1_options)
            @target.set(@key, VALUE)
          end

          def call
            @target.get(@key)
          end
        end

        # Strata::Tiers::SharedMemory#set over a present key.
        class L1Set < Operation
          def initialize(env, name)
            super
            @target = Strata::Tiers::SharedMemory.new(**l1_options)
          end

          def call
            @target.set(@key, VALUE)
          end
        end

        # Strata::Meta::Client#get of a present key, against a real memcached.
        class MemcachedGet < Operation
          def initialize(env, name)
            super
            @target = Strata::Meta::Client.new(**memcached_options)
            @target.set(@key, VALUE)
          end

          def call
            @target.get(@key)
          end
        end

        # Strata::Meta::Client#set, against a real memcached.
        class MemcachedSet < Operation
          def initialize(env, name)
            super
            @target = Strata::Meta::Client.new(**memcached_options)
          end

          def call
            @target.set(@key, VALUE)
          end
        end

        # ActiveSupport::Cache::StrataStore#fetch of a present key (a hit: the block never runs)
        # with the tiers the subclass names.
        class FetchHit < Operation
          def initialize(env, name)
            super
            @target = ActiveSupport::Cache::StrataStore.new(**tiers, **QUIET)
            @target.write(@key, VALUE)
          end

          def call
            @target.fetch(@key) { raise "#{@key} missed" }
          end
        end

        # L1 alone.
        class FetchHitL1 < FetchHit
          def tiers
            {l1: l1_options}
          end
        end

        # L1 over SQLite, the embedded default.
        class FetchHitL1SQL < FetchHit
          def tiers
            {l1: l1_options, sql: sql_options}
          end
        end

        # memcached alone: every hit is a round trip.
        class FetchHitMemcached < FetchHit
          def tiers
            {memcached: memcached_options}
          end
        end

        # L1 alone, the entry and the fetch carrying four dependency tags: the hit checks four
        # stamps (docs/coherence.md). Against fetch_hit_l1, what tags cost a hit.
        class FetchHitL1Tagged < FetchHitL1
          TAGS = %w[instructions:a instructions:b instructions:c instructions:d].freeze

          def initialize(env, name)
            super
            @target.write(@key, VALUE, tags: TAGS)
          end

          def call
            @target.fetch(@key, tags: TAGS) { raise "#{@key} missed" }
          end
        end

        # L1 over SQLite with the four tags of fetch_hit_l1_tagged: the stamps are checked against
        # L1's copies of the SQL tier's versions. Against fetch_hit_l1_sql, what tags cost a hit
        # of the embedded default. QUIET's coherence_interval keeps the copies for the whole run,
        # so their refresh (four SQLite reads a second) is not counted.
        class FetchHitL1SQLTagged < FetchHitL1SQL
          def initialize(env, name)
            super
            @target.write(@key, VALUE, tags: FetchHitL1Tagged::TAGS)
          end

          def call
            @target.fetch(@key, tags: FetchHitL1Tagged::TAGS) { raise "#{@key} missed" }
          end
        end

        # StrataStore#write of a 30 B value over a present key, L1 alone: a write's own work
        # (the entry's bytes, the table's set and its read-back, the host counters).
        class WriteL1 < FetchHitL1
          def call
            @target.write(@key, VALUE)
          end
        end

        # StrataStore#read of a key no tier holds, L1 alone: what a miss costs before any fill.
        class ReadMissL1 < FetchHitL1
          def initialize(env, name)
            super
            @absent = "#{@key}:absent"
          end

          def call
            @target.read(@absent)
          end
        end

        # StrataStore#fetch of a key no tier holds, L1 alone, the block's 30 B value written: a
        # cold miss (the host's single-flight lock, the block, the write). A new key each call.
        class FetchMissL1 < FetchHitL1
          def initialize(env, name)
            super
            @misses = 0
          end

          def call
            @misses += 1
            @target.fetch("#{@key}:miss:#{@misses}") { VALUE }
          end
        end

        # StrataStore#read_multi of a page of 75 cached 600 B Strings, each stamped with two tags,
        # L1 alone: what Strata::Representation's collection reads (docs/representation.md).
        class ReadMulti75L1 < FetchHitL1
          PAGE = 75
          DOCUMENT = %({"id":1,"title":"#{"x" * 560}"}).freeze

          def initialize(env, name)
            super
            @keys = Array.new(PAGE) { |index| "#{@key}:page:#{index}" }
            @keys.each_with_index { |key, index| @target.write(key, DOCUMENT, tags: ["bugs/#{index}", "projects/#{index % 7}"]) }
          end

          def call
            raise "read_multi missed" unless @target.read_multi(*@keys).size == PAGE
          end
        end

        # All three tiers.
        class FetchHitFull < FetchHit
          def tiers
            {l1: l1_options, memcached: memcached_options, sql: sql_options}
          end
        end

        # name => class, in the table's order.
        ALL = {
          "l1_get" => L1Get,
          "l1_set" => L1Set,
          "memcached_get" => MemcachedGet,
          "memcached_set" => MemcachedSet,
          "fetch_hit_l1" => FetchHitL1,
          "fetch_hit_l1_tagged" => FetchHitL1Tagged,
          "fetch_hit_l1_sql" => FetchHitL1SQL,
          "fetch_hit_l1_sql_tagged" => FetchHitL1SQLTagged,
          "fetch_hit_memcached" => FetchHitMemcached,
          "fetch_hit_l1_memcached_sql" => FetchHitFull,
          "write_l1" => WriteL1,
          "read_miss_l1" => ReadMissL1,
          "read_multi_75_l1" => ReadMulti75L1,
          "fetch_miss_l1" => FetchMissL1
        }.freeze

        def self.open(name, env)
          ALL.fetch(name).new(env, name)
        end
      end
    end
  end
end
