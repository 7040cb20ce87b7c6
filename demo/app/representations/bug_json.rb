# frozen_string_literal: true

# A bug's JSON: Strata::Representation keeps each bug's full entry string under its tags
# (Bug#strata_cache_tags), joins a page's entries into a collection, and strips the owner's email
# from what a viewer may not see (Viewer#sees_email_of?).
module BugJson
  NAME = "bug/v1"
  OWNER_EMAIL = ["owner_email"].freeze

  SERIALIZER = lambda do |bug|
    Current.builds += 1
    {
      "self_link" => "/bugs/#{bug.id}",
      "id" => bug.id,
      "title" => bug.title,
      "description" => bug.description,
      "status" => bug.status,
      "importance" => bug.importance,
      "project" => bug.project.name,
      "owner_name" => bug.owner.name,
      "owner_email" => bug.owner.email,
      "tags" => bug.tags.map(&:name),
      "date_created" => bug.created_at.utc.iso8601(3),
      "date_last_updated" => bug.updated_at.utc.iso8601(3)
    }
  end

  HIDDEN = ->(viewer, bug) { viewer.sees_email_of?(bug) ? nil : OWNER_EMAIL }

  # The cache a request's representation reads (the X-Representation-Cache header): strata
  # (Rails.cache, the default) or, for the bench's comparison, memory or none.
  CACHES = %w[strata memory none].freeze

  class << self
    # The representation over cache (one of CACHES), made once per process.
    def for(cache)
      representations.fetch(cache) do
        raise ArgumentError, "X-Representation-Cache must be one of #{CACHES.join(", ")}, got #{cache.inspect}"
      end
    end

    private

    def representations
      @representations ||= {
        "strata" => build(Rails.cache),
        "memory" => build(MemoryCache.new(size: 64 << 20)),
        "none" => build(NoCache.new)
      }.freeze
    end

    def build(cache)
      Strata::Representation.new(cache: cache, name: NAME, serializer: SERIALIZER, hidden: HIDDEN)
    end
  end
end
