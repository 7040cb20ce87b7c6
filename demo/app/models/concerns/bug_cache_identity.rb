# frozen_string_literal: true

# What a bug's cache entry (BugJson) is keyed and tagged by, the same for a Bug and a BugRow.
module BugCacheIdentity
  # "bugs/42", the key Strata::Representation makes for a model by default. Defined here, it is
  # also found at once: for a model without it, Active Record looks the name up among its
  # attribute methods first.
  def strata_cache_key
    Bug.cache_tag_for(id)
  end

  # The bug's own tag, which its tags' changes reach by cascade (BugTag), and those of the project
  # and the owner whose names (and email) its JSON shows.
  def strata_cache_tags
    [Bug.cache_tag_for(id), Project.cache_tag_for(project_id), Person.cache_tag_for(owner_id)]
  end
end
