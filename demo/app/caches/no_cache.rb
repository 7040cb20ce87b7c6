# frozen_string_literal: true

# The bench's "no cache" (X-Representation-Cache: none): every entry is built on every request.
class NoCache < ActiveSupport::Cache::NullStore
  def invalidate_tags(*)
    true
  end
end
