# frozen_string_literal: true

# The bench's yardstick "in-process Hash" (X-Representation-Cache: memory): an
# ActiveSupport::Cache::MemoryStore in each worker. It keeps no tags, so any invalidate_tags
# empties it: correct within its process, and never seen by the other worker. Only for measuring.
class MemoryCache < ActiveSupport::Cache::MemoryStore
  def invalidate_tags(*)
    clear
    true
  end
end
