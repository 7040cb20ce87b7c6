# frozen_string_literal: true

# A bug's JSON: Strata::Representation keeps each bug's full entry string under its tags
# (BugCacheIdentity), joins a page's entries into a collection, and strips the owner's email
# from what a viewer may not see (Viewer#sees_email_of?), caching each stripped copy as well.
module BugJson
  NAME = "bug/v1"
  OWNER_EMAIL = ["owner_email"].freeze
  TOTAL_SIZE_KEY = "bugs/total_size"
  PAGE_ROWS_KEY = "bugs/rows/%d/%d"

  # A Bug's every field; given a BugRow, it loads the Bug.
  SERIALIZER = lambda do |bug|
    Current.builds += 1
    bug = Bug.find(bug.id) if bug.is_a?(BugRow)
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

  # The caches a request's representation may read (the X-Representation-Cache header): strata
  # (Rails.cache, the default) or, for the bench's comparison, memory, floor or none.
  CACHES = %w[strata memory floor none].freeze

  class << self
    # The representation over cache (one of CACHES), made once per process.
    def for(cache)
      representations.fetch(cache) { raise unknown(cache) }
    end

    # How many bugs there are, kept in cache's store under the bugs' collection tag, which a
    # change of any bug invalidates.
    def total_size(cache)
      stores.fetch(cache) { raise unknown(cache) }.fetch(TOTAL_SIZE_KEY, tags: Bug.cache_tag) { Bug.count }
    end

    # The BugRows of the page of size bugs from start (by id), kept in cache's store under the
    # bugs' collection tag like total_size: a page that is cached costs no query for its rows.
    # A change of any bug (its collection tag: a bug added, deleted or updated, raw SQL included)
    # makes every page's rows read again.
    def page_rows(cache, start, size)
      store = stores.fetch(cache) { raise unknown(cache) }
      rows = store.fetch(format(PAGE_ROWS_KEY, start, size), tags: Bug.cache_tag) do
        Bug.order(:id).offset(start).limit(size).pluck(*BugRow.members)
      end
      rows.map { |values| BugRow.new(*values) }
    end

    private

    def representations
      @representations ||= stores.transform_values do |store|
        Strata::Representation.new(cache: store, name: NAME, serializer: SERIALIZER, hidden: HIDDEN, cache_redacted: true)
      end.freeze
    end

    def unknown(cache)
      ArgumentError.new("X-Representation-Cache must be one of #{CACHES.join(", ")}, got #{cache.inspect}")
    end

    # strata only when Rails.cache keeps tags: not when the app runs on another store
    # (STRATA_DEMO_CACHE).
    def stores
      @stores ||= {"strata" => (Rails.cache if Rails.cache.respond_to?(:invalidate_tags)), "memory" => MemoryCache.new(size: 64 << 20),
                   "floor" => FloorCache.new, "none" => NoCache.new}.compact.freeze
    end
  end
end
