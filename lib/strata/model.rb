# frozen_string_literal: true

require "set"
require "active_record"
require "strata/transaction_tags"

module Strata
  # Active Record opt-in for dependency tags (docs/coherence.md, "Active Record"):
  #
  #   class Bug < ApplicationRecord
  #     include Strata::Model
  #   end
  #
  #   class BugTag < ApplicationRecord
  #     include Strata::Model
  #     belongs_to :bug
  #     strata_cascade :bug # a tag added, changed or removed changes its bug
  #   end
  #
  #   Rails.cache.fetch(["bug", bug.id], tags: bug.cache_tag) { render(bug) } # "bugs/42"
  #   Rails.cache.fetch("bug-index", tags: Bug.cache_tag) { ... }              # "bugs"
  #
  # When a record is created, updated or destroyed, its tag ("bugs/42"), its table's collection
  # tag ("bugs") and those of the records it cascades to are invalidated after its transaction
  # commits; a rollback invalidates nothing. Until the commit, fetches in the same thread (or
  # fiber) that depend on those tags bypass the cache (Strata::TransactionTags). A cascade is
  # declared on a belongs_to association: the parent the record points to, and the one it
  # pointed to before when the foreign key changed, count as changed too, and so do their own
  # cascades, transitively (each record once, so loops end).
  #
  # The tags go through the model's store: strata_cache_store, else Strata::Model.cache_store,
  # else Rails.cache. It must respond to invalidate_tags (ActiveSupport::Cache::StrataStore).
  #
  # The tags are the ones the raw SQL triggers write (bin/rails generate strata:triggers): table
  # name, slash, primary key. Composite primary keys are not supported.
  module Model
    extend ActiveSupport::Concern

    class << self
      # The store every model without its own uses (nil: Rails.cache).
      attr_reader :cache_store

      def cache_store=(store)
        @cache_store = Model.check_store(store, "Strata::Model.cache_store")
      end

      # Warns once per store that store (Rails.cache) keeps no tags, so that model changes
      # invalidate nothing through it. nil.
      def untagged(store)
        @untagged ||= {}.compare_by_identity
        return nil if @untagged[store]

        @untagged[store] = true
        message = "Strata::Model: Rails.cache (#{store.class}) keeps no tags; model changes invalidate nothing " \
          "until it is an ActiveSupport::Cache::StrataStore"
        logger = ::Rails.logger if defined?(::Rails) && ::Rails.respond_to?(:logger)
        logger ? logger.warn(message) : warn(message)
        nil
      end

      # store, when it can invalidate tags; else ArgumentError naming where it was given.
      def check_store(store, where)
        return store if store.nil? || store.respond_to?(:invalidate_tags)

        raise ArgumentError, "#{where}: #{store.class} can't invalidate tags (it has no invalidate_tags); " \
          "use an ActiveSupport::Cache::StrataStore"
      end
    end

    included do
      class_attribute :strata_cascades, instance_accessor: false, default: [].freeze
      class_attribute :strata_own_store, instance_accessor: false, default: nil

      after_save :strata_changed
      after_destroy :strata_changed
      after_touch :strata_touched
      after_commit :strata_committed
      after_rollback :strata_rolled_back
    end

    class_methods do
      # Declares that a change of this model's records changes the records that the belongs_to
      # associations names point to (see Strata::Model). The associations are looked up at the
      # first change, so they may be declared after this.
      def strata_cascade(*names)
        names = names.flatten
        raise ArgumentError, "strata_cascade needs at least one association name" if names.empty?

        names.each do |name|
          raise ArgumentError, "strata_cascade: #{name.inspect} is not an association name" unless name.is_a?(Symbol) || name.is_a?(String)
        end
        self.strata_cascades = (strata_cascades + names.map(&:to_sym)).uniq.freeze
      end

      # Sets the store this model's tags are invalidated through (see Strata::Model).
      def strata_cache_store(store)
        self.strata_own_store = Model.check_store(store, "#{name}.strata_cache_store")
      end

      # The store tags are invalidated through: this model's, the global one or Rails.cache; nil
      # when Rails.cache keeps no tags (development's :memory_store, test's :null_store): the
      # changes then invalidate nothing, with one warning per store.
      def strata_store
        own = strata_own_store || Model.cache_store
        return own if own

        store = (::Rails.cache if defined?(::Rails) && ::Rails.respond_to?(:cache))
        raise ArgumentError, "#{name}: no cache store to invalidate tags through (set Strata::Model.cache_store)" unless store
        return store if store.respond_to?(:invalidate_tags)

        Model.untagged(store)
      end

      # The collection tag: the table name ("bugs"), invalidated by every change of a record.
      def cache_tag
        table_name
      end

      # The tag of the record whose primary key is id ("bugs/42").
      def cache_tag_for(id)
        "#{table_name}/#{id}"
      end

      # The tags a change of the record with primary key id makes out of date, added to tags
      # (Strings): its own, the collection's, and those of its cascades, read from the database.
      # seen: the record tags already visited.
      def strata_tags_of(id, tags, seen)
        tag = cache_tag_for(id)
        return tags unless seen.add?(tag)

        tags << tag << cache_tag
        return tags if strata_cascades.empty?

        record = unscoped.find_by(primary_key => id)
        record&.strata_cascade_tags(tags, seen, false)
        tags
      end
    end

    # This record's tag: "bugs/42".
    def cache_tag
      self.class.cache_tag_for(id)
    end

    # Adds the tags of the records this one cascades to (both the parent before and after when
    # changed is true and a foreign key changed) to tags. See ClassMethods#strata_tags_of.
    def strata_cascade_tags(tags, seen, changed)
      self.class.strata_cascades.each do |name|
        reflection = strata_reflection(name)
        strata_parents(reflection, changed).each do |klass, id|
          if klass.include?(Model)
            klass.strata_tags_of(id, tags, seen)
          elsif seen.add?(tag = "#{klass.table_name}/#{id}")
            tags << tag << klass.table_name
          end
        end
      end
      tags
    end

    private

    # after_save, after_destroy: this change's tags wait for the transaction's end. A save that
    # changed nothing changes no tag.
    def strata_changed
      strata_pending(true) if destroyed? || saved_changes.any?
    end

    # after_touch (touch, and belongs_to touch: true): a change of the record, not of its keys.
    # A touch that wrote nothing (no timestamp column) gets no after_commit: nothing to wait for.
    def strata_touched
      strata_pending(false) if trigger_transactional_callbacks?
    end

    # Adds the tags of this change to the transaction's pending ones. keys_changed: the save may
    # have changed foreign keys (the parents before count too) or the primary key.
    def strata_pending(keys_changed)
      return unless (store = self.class.strata_store)

      seen = Set.new
      tags = [cache_tag, self.class.cache_tag]
      seen << cache_tag
      if keys_changed && (previous = strata_previous_id)
        tags << self.class.cache_tag_for(previous)
        seen << tags.last
      end
      strata_cascade_tags(tags, seen, keys_changed)
      connection = strata_connection
      TransactionTags.add(connection, connection.current_transaction, store, tags.uniq)
    end

    # after_commit: the connection's committed changes (this record's and those of the other
    # records of its transaction) are invalidated, once, by the first record to get here.
    def strata_committed
      TransactionTags.invalidate(TransactionTags.committed(strata_connection))
    end

    # after_rollback: the rolled back changes are forgotten; nothing is invalidated.
    def strata_rolled_back
      TransactionTags.rolled_back
    end

    # The primary key this record had before the save, when the save changed it.
    def strata_previous_id
      key = self.class.primary_key
      attribute_before_last_save(key) if !destroyed? && saved_change_to_attribute?(key) && !previously_new_record?
    end

    # The connection this record's transaction runs on (leased already: callbacks run inside it).
    def strata_connection
      klass = self.class
      klass.respond_to?(:lease_connection) ? klass.lease_connection : klass.connection
    end

    def strata_reflection(name)
      reflection = self.class.reflect_on_association(name)
      unless reflection&.belongs_to?
        raise ArgumentError, "#{self.class.name}: strata_cascade #{name.inspect} names no belongs_to association"
      end

      reflection
    end

    # [[class, id], ...] of the parents of reflection: the current one and, when changed and the
    # foreign key (or type) changed in the last save, the previous one.
    def strata_parents(reflection, changed)
      key = reflection.foreign_key
      type = reflection.foreign_type if reflection.polymorphic?
      parents = [[strata_parent_class(reflection, type && strata_value(type)), strata_value(key)]]
      if changed && !destroyed? && (saved_change_to_attribute?(key) || (type && saved_change_to_attribute?(type)))
        before = type && attribute_before_last_save(type)
        parents << [strata_parent_class(reflection, before), attribute_before_last_save(key)]
      end
      parents.select { |klass, id| klass && id }
    end

    # attribute's value in the row: a destroyed record's as it was deleted.
    def strata_value(attribute)
      destroyed? ? attribute_in_database(attribute) : self[attribute]
    end

    def strata_parent_class(reflection, type)
      return reflection.klass unless reflection.polymorphic?

      type && self.class.polymorphic_class_for(type)
    end
  end
end
