# frozen_string_literal: true

# The thumbnail scenario (issue 4): a site records which thumbnails it has already generated, as
# job signature => stored uid. Generating one is expensive (decode, resize, encode, upload), so
# the mapping must outlive memcached evictions and restarts: that is the SQL tier's job. The
# tiers above keep warm lookups off the database.
#
#   cache = ActiveSupport::Cache::StrataStore.new(
#     l1: {size: 64 * 1024 * 1024},
#     memcached: {servers: ["127.0.0.1:11211"]},
#     sql: {path: "storage/thumbnails.sqlite3"},
#     namespace: "thumbs"
#   )
#   registry = ThumbnailRegistry.new(cache)
#   uid = registry.uid_for(signature) { generate_and_store(signature) }
class ThumbnailRegistry
  def initialize(cache)
    @cache = cache
  end

  # The stored uid for the thumbnail job signature; the block generates and stores the thumbnail
  # and returns its uid, and runs only when no tier knows the signature.
  def uid_for(signature, &generate)
    @cache.fetch(key(signature), &generate)
  end

  # Forget a thumbnail (its source image changed): every tier, bottom-up.
  def forget(signature)
    @cache.delete(key(signature))
  end

  private

  def key(signature)
    "thumbnail/#{signature}"
  end
end
