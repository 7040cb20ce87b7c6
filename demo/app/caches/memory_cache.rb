# frozen_string_literal: true

# The bench's yardstick "in-process Hash" (X-Representation-Cache: memory): an
# ActiveSupport::Cache::MemoryStore in each worker. Nothing in the app invalidates it (the
# models invalidate through Rails.cache), so after a change it serves the old JSON: it is only
# for measuring. invalidate_tags, which Strata::Representation asks of its cache, empties it.
class MemoryCache < ActiveSupport::Cache::MemoryStore
  def invalidate_tags(*)
    clear
    true
  end
end
