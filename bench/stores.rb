# frozen_string_literal: true

require_relative "stores/ruby_hash"
require_relative "stores/rails_floor"
require_relative "stores/memory_store"
require_relative "stores/file_store"
require_relative "stores/mem_cache_store"
require_relative "stores/solid_cache_store"
require_relative "stores/dalli"
require_relative "stores/raw_socket"
require_relative "stores/strata_l1"
require_relative "stores/strata_store"
require_relative "stores/strata_store_l1"
require_relative "stores/strata_memcached"
require_relative "stores/strata_store_l2"
require_relative "stores/strata_sql"
require_relative "stores/strata_store_full"

module Strata
  module Bench
    # The stores the bench knows, in the table's column order: the floors (a Hash, and Active
    # Support's own cost), the Rails cache stores (solid_cache among them), the dalli client,
    # memcached by hand, then Strata. A new store is one file under bench/stores plus one entry
    # here.
    module Stores
      ALL = [RubyHash, RailsFloor, MemoryStore, FileStore, MemCacheStore, SolidCacheStore, DalliClient, RawSocket,
        StrataL1, StrataStoreL1, StrataStore, StrataMemcached, StrataStoreL2, StrataSQL, StrataStoreFull].freeze

      # What bin/bench runs without --stores or --full: the stores a Rails app chooses between,
      # all through the Rails API, and the floor of that API. The others (a bare Hash, the
      # memcached clients without Rails, Strata's tiers used alone) answer questions about how
      # Strata is built; --full adds them.
      DEFAULT = [RailsFloor, MemoryStore, FileStore, MemCacheStore, SolidCacheStore, StrataStoreL1, StrataStore,
        StrataStoreFull].freeze

      # The stores the ratio tables compare against every other column.
      STRATA = [StrataL1::NAME, StrataStoreL1::NAME, StrataStore::NAME, StrataMemcached::NAME, StrataStoreL2::NAME,
        StrataSQL::NAME, StrataStoreFull::NAME].freeze

      # The store every other is given as a share of, when it ran.
      FLOOR = RailsFloor::NAME

      # The memcached clients used without Rails, for the client CPU table; the first is the
      # yardstick the others are divided by.
      CLIENTS = [RawSocket::NAME, StrataMemcached::NAME, DalliClient::NAME].freeze

      def self.names
        ALL.map { |store| store::NAME }
      end

      def self.default_names
        DEFAULT.map { |store| store::NAME }
      end

      def self.find(name)
        ALL.find { |store| name == store::NAME } or
          raise ArgumentError, "unknown store #{name.inspect} (stores: #{names.join(", ")})"
      end
    end
  end
end
