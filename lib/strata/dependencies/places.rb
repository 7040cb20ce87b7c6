# frozen_string_literal: true

require "strata/errors"

module Strata
  class Dependencies
    # Tag id => the reserved key of its version (KEY_FORMAT), kept per id up to CACHE_SIZE
    # (then forgotten all at once): making one costs more than the L1 lookup it is for. A Hash,
    # not a lock: each read and write of it is one C call under the GVL, and a key lost to a
    # concurrent clear is only made again.
    class VersionKeys
      CACHE_SIZE = 4096

      def initialize
        @keys = {}
      end

      def [](id)
        @keys[id] ||= begin
          @keys.clear if @keys.size >= CACHE_SIZE
          format(KEY_FORMAT, id).freeze
        end
      end
    end

    # The versions of a tier that keeps them as entries under reserved keys (VersionKeys): the
    # few calls Dependencies makes, by tag id, turned into the tier's own on keys. Results come
    # back by id, a PartialError's too.
    class KeyedVersions
      def initialize(tier, keys)
        @tier = tier
        @keys = keys
      end

      def get(id)
        @tier.get(@keys[id])
      end

      def get_multi(ids)
        by_id(ids) { |keys| @tier.get_multi(keys) }
      end

      def peek_multi(ids)
        by_id(ids) { |keys| @tier.peek_multi(keys) }
      end

      def set(id, bytes, ttl)
        @tier.set(@keys[id], bytes, ttl: ttl)
      end

      def add(id, bytes, ttl)
        @tier.add(@keys[id], bytes, ttl: ttl)
      end

      def delete(id)
        @tier.delete(@keys[id])
      end

      def delete_multi(ids)
        @tier.delete_multi(ids.map { |id| @keys[id] })
      end

      # Whether id's version key has its server down in this process: a delete of it is only
      # noted for the server's return, so the server's copy is not gone yet.
      def away?(id)
        @tier.capabilities[:gutter] && @tier.gutter?(@keys[id])
      end

      private

      def by_id(ids)
        keys = ids.map { |id| @keys[id] }
        begin
          found = yield keys
        rescue PartialError => error
          raise PartialError.new(error.message, result: ids_of(keys, ids, error.result), tier: error.tier, server: error.server),
            cause: error.cause
        end
        ids_of(keys, ids, found)
      end

      def ids_of(keys, ids, found)
        result = {}
        keys.each_with_index do |key, index|
          bytes = found[key]
          result[ids[index]] = bytes if bytes
        end
        result
      end
    end

    # The versions of a tier that keeps them apart, by tag id (capability :versions; Tier's
    # versions methods), which take no TTL: that tier is the authority, whose versions never
    # lapse.
    class TierVersions
      def initialize(tier)
        @tier = tier
      end

      def get(id)
        @tier.get_versions([id])[id]
      end

      def get_multi(ids)
        @tier.get_versions(ids)
      end

      def peek_multi(ids)
        @tier.peek_versions(ids)
      end

      def set(id, bytes, _ttl)
        @tier.set_version(id, bytes)
      end

      def add(id, bytes, _ttl)
        @tier.add_version(id, bytes)
      end

      def delete(id)
        @tier.delete_versions([id])
      end

      def delete_multi(ids)
        @tier.delete_versions(ids)
      end

      def away?(_id)
        false
      end
    end
  end
end
