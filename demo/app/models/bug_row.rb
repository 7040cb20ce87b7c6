# frozen_string_literal: true

# A handle on a bug for reading its JSON: the columns its cache key, tags and redaction need,
# plucked, so that an entry or a page that is cached instantiates no Bug. BugJson's serializer
# loads the Bug when the entry must be built.
BugRow = Struct.new(:id, :project_id, :owner_id) do
  include BugCacheIdentity

  # The row of the bug whose id is id; ActiveRecord::RecordNotFound when there is none.
  def self.find(id)
    of(Bug.where(id: id)).first || raise(ActiveRecord::RecordNotFound.new("Couldn't find Bug with 'id'=#{id}", "Bug", "id", id))
  end

  # The rows of relation (of Bugs), in its order.
  def self.of(relation)
    relation.pluck(*members).map { |values| new(*values) }
  end
end
