# frozen_string_literal: true

module Strata
  # The versions some tags had when StrataStore#tag_versions read them: given to fetch, write or
  # write_multi as `as_of:`, the entry is stamped with these versions rather than the ones the
  # call reads itself. That is for a value computed from data loaded after tag_versions and
  # before the call (Strata::Representation reloads what it renders so): a change committed in
  # between makes the entry miss, where stamps read after the load would hide it for good.
  # Immutable.
  class TagVersions
    # versions: tag id (Strata::Dependencies.tag_id) => version.
    def initialize(versions)
      @versions = versions.freeze
      freeze
    end

    # The version read for tag id, or nil when it was not read.
    def [](id)
      @versions[id]
    end

    def size
      @versions.size
    end
  end
end
