# frozen_string_literal: true

module Strata
  # Action View's `cache` helper over a StrataStore (prepended to ActionView::Helpers::CacheHelper
  # when Action View loads; docs/coherence.md, "View fragments"). Rails' helper reads the
  # fragment, and on a miss renders it and writes it: two calls, so a store would take the
  # fragment's tag versions when it writes, after the rendering read its data, and an inner
  # fragment's stamps would not reach the fragment around it. Here the helper's read, render and
  # write run as one computation of the fragment's entry (StrataStore#fragment): the versions of
  # its tags are read before its read, the stamps of what it reads inside (inner fragments,
  # fetches) are added, and the fragment around it gets them all. The fragment is tagged with
  # its `tags:` (Strings, records, relations or models) and with the Strata::Model records and
  # relations its name holds (`cache [post, post.comments]`: "posts/42" and "comments").
  #
  # Overrides the helper's private fragment_for (Action View 7.1 to 8.1; listed with the other
  # private API Strata uses in test/strata_store/rails_private_api_test.rb).
  module Fragments
    private

    def fragment_for(name = {}, options = nil, &block)
      store = controller.cache_store if controller.respond_to?(:cache_store)
      return super unless store.respond_to?(:fragment)

      pos = output_buffer.length
      store.fragment(controller.combined_fragment_cache_key(name), name, options) do |merged|
        super(name, merged, &block)
      rescue
        # A render that raised leaves nothing half-written: fail_safe: may answer the last good one.
        output_buffer.slice!(pos..-1) if output_buffer.length > pos
        raise
      end
    end
  end
end
