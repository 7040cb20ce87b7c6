# frozen_string_literal: true

# A collection page's handle on a bug: the columns its cache key, tags and redaction need,
# plucked, so that a page whose entries are all cached instantiates no Bug. BugJson's serializer
# loads the Bug when the entry must be built.
BugRow = Struct.new(:id, :project_id, :owner_id) do
  include BugCacheIdentity

  # The rows of relation (of Bugs), in its order.
  def self.of(relation)
    relation.pluck(*members).map { |values| new(*values) }
  end
end
