# frozen_string_literal: true

require "active_support/cache"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # Dependency tags (docs/coherence.md): the versions a write or a fetch's computation is stamped
      # with (read before its block; what the block reads adds its own), tag_versions and as_of:,
      # fragments' records, invalidate_tags and the transactions that defer it.
      module Tags
        # Rails 8.1 reports events (ActiveSupport.event_reporter, Rails.event); invalidate_tags
        # reports INVALIDATE_REPORTED there too. The lines before it have no reporter.
        REPORTS_EVENTS = ActiveSupport.respond_to?(:event_reporter)
        INVALIDATE_EVENT = "invalidate.strata"
        INVALIDATE_REPORTED = "strata.invalidate"
        # stamps_for's answer for a computation whose result must not be cached (Computation#spoiled).
        SPOILED = [].freeze
        # Seconds a soft invalidation leaves entries stale before they miss (the store's
        # stale_for: option).
        DEFAULT_STALE_FOR = 60

        # The current versions of tags (Strings or Symbols), read now, one read per tier for all of
        # them: a Strata::TagVersions for fetch's, write's or write_multi's `as_of:`, which stamps
        # the entry with these versions instead of those read by the call. For a value computed
        # from data loaded after this and before that call: a change committed in between makes
        # the entry miss, where versions read after the load would cover it for good.
        #
        #   as_of = Rails.cache.tag_versions(post.cache_tag)
        #   fresh = Post.includes(:comments).find(post.id)   # loaded after the versions
        #   Rails.cache.fetch(post, tags: post.cache_tag, as_of: as_of) { render(fresh) }
        def tag_versions(*tags)
          tags = tags.flatten
          ids = tag_ids(tags)
          Strata::TagVersions.new(ids.zip(@engine.versions(ids)).to_h)
        end

        # Action View's fragment path (Strata::Fragments): runs the block, the `cache` helper's read
        # of the fragment under key (a controller's combined fragment key) and, on a miss, its
        # render and write, as the computation of the fragment's entry, as #fetch runs its block:
        # the versions of its tags are read first, and what it reads inside (inner fragments,
        # fetches) is added to its stamps and to those of the computation around it. The tags:
        # those in options (tags: takes what #fetch's does) and the Strata::Model records and
        # relations in name. Yields the options the helper goes on with.
        def fragment(key, name, options)
          options = options ? options.dup : {}
          tags = fragment_tags(name, options[:tags])
          options[:tags] = tags unless tags.empty?
          check_fail_safe_options(options) if options.key?(:fail_safe) || options.key?(:fail_safe_throttle) || options.key?(:stale_while_revalidate)
          merged = merged_options(options)
          key = normalize_key(key, merged)
          capturing(key, tags.empty? ? nil : tags, merged[:as_of]) do |capture|
            capture.loaded = [name, options[:tags]] unless tags.empty? # checked if it is written (#stamps_for)
            begin
              rendered = yield options
              recovered(key) if capture.last_good
              rendered
            rescue => error
              raise unless capture.last_good

              fallen_back(key, capture.last_good, error, merged, capture)
            ensure
              revalidated(key) if capture.revalidating
            end
          end
        end

        # The computation of the fragment under key when it is rendering (#fragment: its claims
        # are nil and its key is key), else nil.
        def rendering_fragment(key)
          computation = @engine.current
          computation if computation && computation.claims.nil? && computation.keys == key
        end

        # Gives each tag a new version: every entry stamped with an older one (written with tags:,
        # or built by a fetch that read such an entry) misses from then on. In this process the
        # next read misses; in other processes sharing the L1 table too; on other hosts within
        # poll_interval where a poller runs, else coherence_interval (docs/coherence.md). One
        # write per tier and tag, however many entries depend on it. Emits invalidate.strata with
        # tags:, versions: (how many were bumped: one per distinct tag), store: and, when
        # Strata.trace_invalidations, caller: (the calling line). False when a tier could neither
        # take a new version nor drop its old one (reported).
        #
        # Called while an Active Record transaction is open in this thread (joinable: not a
        # test's own), the bump waits for its commit and a rollback makes none; until then this
        # thread neither serves nor caches what depends on the tags (Strata::TransactionTags#defer).
        # True then.
        #
        # soft: true makes the invalidation soft (docs/coherence.md, "Soft invalidation"): for
        # stale_for seconds (the store's stale_for:, a minute unless set) an entry built from
        # the tags is stale, not missing: a read answers it (stale: true in its event), and a
        # fetch answers it while the one caller that takes its claim (per host with L1, across
        # hosts with memcached) recomputes it; past the window it misses. The event carries
        # soft: true and stale_for:.
        def invalidate_tags(*tags, soft: false, stale_for: nil)
          tags = tags.flatten
          raise ArgumentError, "invalidate_tags needs at least one tag" if tags.empty?
          raise ArgumentError, "invalidate_tags: soft: must be true or false, got #{soft.inspect}" unless soft == true || soft == false
          raise ArgumentError, "invalidate_tags: stale_for: is a soft invalidation's window; give soft: true" if stale_for && !soft

          ids = tag_ids(tags)
          window = soft ? (Strata::Engine.stale_for(stale_for) || @stale_for) : nil
          return true if Strata::TransactionTags.defer(self, tags.map(&:to_s), window)

          payload = {tags: tags.map(&:to_s), versions: ids.size, store: self.class.name}
          payload.update(soft: true, stale_for: window) if window
          payload[:caller] = caller_locations(1, 1).first.to_s if Strata.trace_invalidations
          bumped = ActiveSupport::Notifications.instrument(INVALIDATE_EVENT, payload) do
            done = @engine.invalidate(ids, stale_for: window)
            local_cache&.clear # it serves entries without their stamps checked
            done
          end
          # Once bumped (a deferred bump reports when its transaction commits); the event's
          # source_location is the caller's line (caller_depth 2).
          if REPORTS_EVENTS
            reported = {tags: payload[:tags], versions: ids.size}
            reported.update(soft: true, stale_for: window) if window
            ActiveSupport.event_reporter&.notify(INVALIDATE_REPORTED, reported, caller_depth: 2)
          end
          bumped
        end

        private

        # Whether options' tags: name a tag a transaction open in this thread changed: the fetch
        # then runs as with force: true (no read), and its write is withheld (#write_entry). nil
        # (not hidden either) when there are tags and no transaction has any pending.
        def hidden_by_transaction?(options)
          tags = options[:tags]
          return false unless tags

          Strata::TransactionTags.current ? Strata::TransactionTags.hides_ids?(tag_ids(tags)) : nil
        end

        # Whether an entry with stamps may be stored. Not when a transaction open in this thread
        # changed one of their tags (Strata::TransactionTags), nor when they are more than an entry
        # holds (Strata::Entry::MAX_STAMPS): a computation that read entries of that many tags. That
        # one is reported (Strata::TooManyStampsError) and not cached: an entry without all of its
        # dependencies would outlive their invalidation.
        def storable?(key, stamps)
          return false if stamps.equal?(SPOILED) || Strata::TransactionTags.hides?(stamps)
          return true if stamps.size <= Strata::Entry::MAX_STAMPS

          report_failure(Strata::TooManyStampsError.new("#{key}: #{stamps.size} dependency stamps, an entry holds at most " \
            "#{Strata::Entry::MAX_STAMPS}; not cached"))
          false
        end

        # A value that depends on changes a transaction open in this thread has not committed is
        # not cached (Strata::TransactionTags): a fetch's result is left unwritten; a write deletes
        # the key, whose old value may not carry the tag. False: nothing was stored.
        def withheld(key)
          delete_entry(key) unless @engine.computing&.for?(key)
          false
        end

        # Runs the block as the computation of the entries under keys (Strata::Engine#capturing),
        # stamped with the versions of tags, read now (before the block, so that an invalidation
        # during it makes the entry miss), or those in as_of: a Strata::TagVersions read earlier
        # (#tag_versions).
        def capturing(keys, tags, as_of = nil, claims = nil, &block)
          @engine.capturing(keys, tags ? stamps_of(tags, as_of) : Strata::Entry::NO_STAMPS, claims, &block)
        end

        # The stamps the entry written under key carries: the computation's whose result it is;
        # during the read-through of key, before its block (Rails putting the stale entry back for
        # race_condition_ttl), those of the entry it read; else the versions of tags in as_of, or
        # their current versions (a write's versions are read when it is called).
        def stamps_for(key, tags, as_of = nil)
          if @engine.current # every write comes here: one look at the slot when nothing runs
            computation = @engine.computing
            if computation&.for?(key)
              if (loaded = computation.loaded) # a fragment's records: checked once, when it is written
                computation.loaded = nil
                computation.spoil! if changed_since_loaded?(*loaded)
              end
              return computation.spoiled ? SPOILED : computation.stamps
            end
            if (words = @engine.claim(key)&.read_stamps)
              return words.each_slice(2).to_a
            end
          end
          return Strata::Entry::NO_STAMPS unless tags

          stamps_of(tags, as_of)
        end

        # The tag of a Strata::Model record ("posts/42"; nil unsaved), or the collection tag of a
        # relation or class of such a model ("posts"); nil for anything else. Strata::Model is not
        # loaded for this: without it, nothing is one.
        def model_tag(object)
          return nil if Strata.autoload?(:Model)

          if object.is_a?(Strata::Model)
            object.id && object.cache_tag
          elsif object.is_a?(Class)
            object.cache_tag if object.include?(Strata::Model)
          elsif object.respond_to?(:klass) && object.respond_to?(:to_sql) # an Active Record relation
            object.klass.cache_tag if object.klass.include?(Strata::Model)
          end
        end

        # Whether a Strata::Model record in a fragment's name or tags changed since it was loaded:
        # its updated_at in the database, read now that the fragment's stamps are read, is not the
        # one it was loaded with. The fragment would then show data older than its stamps, which
        # no later invalidation would remove (the tag's change came before them), so it and the
        # computations around it are not cached (Computation#spoil!). One query per model class, when
        # a missed fragment is written; records without updated_at are not checked.
        def changed_since_loaded?(name, tags)
          return false if Strata.autoload?(:Model)

          records = (Array(name).flatten + Array(tags).flatten).select do |part|
            part.is_a?(Strata::Model) && part.persisted? && part.has_attribute?(:updated_at)
          end
          records.group_by(&:class).any? do |model, loaded|
            current = model.unscoped.where(model.primary_key => loaded.map(&:id)).pluck(model.primary_key, :updated_at).to_h
            loaded.any? { |record| current[record.id] != record.updated_at }
          end
        end

        # A fragment's tags: tags (as tags: takes them; #tag_ids reads them), and the tags of the
        # Strata::Model records and relations in name (a name, or an Array of them).
        def fragment_tags(name, tags)
          found = tags.is_a?(Array) ? tags.compact : [tags].compact
          (name.is_a?(Array) ? name.flatten : [name]).each do |part|
            tag = model_tag(part) unless part.is_a?(String) || part.is_a?(Symbol)
            found << tag if tag
          end
          found
        end

        # [[tag id, version], ...] for tags: their versions in as_of (a Strata::TagVersions), or
        # read now when as_of is nil.
        def stamps_of(tags, as_of)
          ids = tag_ids(tags)
          return Strata::Entry::NO_STAMPS if ids.empty?
          return ids.zip(@engine.versions(ids)) unless as_of
          raise TypeError, "as_of: must be a Strata::TagVersions (from tag_versions), got #{as_of.class}" unless as_of.is_a?(Strata::TagVersions)

          ids.map do |id|
            unless (version = as_of[id])
              tag = Array(tags).find { |name| Strata::Dependencies.tag_id(name.to_s) == id }
              raise ArgumentError, "as_of: has no version of the tag #{tag.inspect}; read it with tag_versions"
            end

            [id, version]
          end
        end

        # The tag ids (Strata::Engine#tag_ids) of tags: a String, a Symbol, a Strata::Model record,
        # relation or model (#model_tag), or an Array of them.
        def tag_ids(tags)
          @engine.tag_ids((tags.is_a?(Array) ? tags : [tags]).map do |tag|
            (tag.is_a?(String) || tag.is_a?(Symbol)) ? tag : (model_tag(tag) || tag)
          end)
        end
      end
    end
  end
end
