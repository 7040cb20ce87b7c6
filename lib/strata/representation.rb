# frozen_string_literal: true

require "json"
require "active_support/core_ext/object/json"
require "active_support/notifications"

module Strata
  # A cache of each record's JSON string, for JSON APIs (docs/representation.md):
  #
  #   BUGS = Strata::Representation.new(
  #     cache: Rails.cache, name: "bug/v1",
  #     serializer: ->(bug) { {"id" => bug.id, "title" => bug.title, "owner_email" => bug.owner.email} },
  #     hidden: ->(viewer, bug) { viewer&.admin? ? nil : ["owner_email"] }
  #   )
  #   BUGS.entry(bug, viewer: current_user)                  # => '{"id":42,"title":...}'
  #   BUGS.collection(bugs, viewer: current_user, envelope: {"total_size" => 120, "start" => 0})
  #   # => '{"total_size":120,"start":0,"entries":[{...},{...}]}'
  #
  # Each record's full JSON (every field the serializer gives) is cached as a plain String under
  # name and the record's key, stamped with the record's tags: a change that invalidates a tag
  # (Strata::Model's after_commit, its cascades, invalidate_tags) makes the next call build it
  # again. A miss builds through the store's fetch: single-flight, the tags' versions read before
  # the serializer runs, and whatever the serializer reads from the cache counted as well.
  #
  # Keys and tags: a record that responds to strata_cache_key (a non-empty String) and
  # strata_cache_tags (a tag or an Array of them) is asked; an Active Record model that includes
  # Strata::Model answers what it does not define itself with "table/id" (its key) and
  # [cache_tag] (its tags). Anything else is an ArgumentError naming its class.
  #
  # Redaction: hidden(viewer, record) names the top-level fields the viewer may not see (nil or
  # empty: all may be seen). Only those entries are parsed, stripped and generated again (at
  # every call; or once, with cache_redacted: true, the copy cached under its own key); an
  # entry the viewer may fully see is the cached String itself, never parsed.
  #
  # A collection reads the page's keys in one read_multi, builds each miss with its own fetch
  # (each entry has its own tags, which one fetch_multi can't give), and joins the entry strings
  # into the list without parsing them.
  #
  # Each call emits entry.representation.strata or collection.representation.strata, with
  # name:, hits:, misses: and redacted: (and size:, for a collection), when someone listens.
  #
  # Safe to share between threads: no state changes after new.
  class Representation
    ENTRY_EVENT = "entry.representation.strata"
    COLLECTION_EVENT = "collection.representation.strata"
    DEFAULT_ENTRIES_KEY = "entries"
    NONE = {}.freeze
    # Levels of nested associations a miss's records are loaded again with.
    MAX_PRELOAD_DEPTH = 3

    attr_reader :name

    # cache: the store entries live in; it must take tags (ActiveSupport::Cache::StrataStore).
    # name: part of every key (change it when the serializer's output changes: "bug/v2").
    # serializer: record -> Hash of every field (made JSON as render json: does, see #render).
    # hidden: (viewer, record) -> the fields that viewer may not see, or nil (without hidden, no
    # redaction at all). cache_redacted: also cache each redacted copy (per set of fields), so
    # that a viewer with hidden fields reads it as others read the full entry.
    # entries_key: the envelope's key for the list of entries, for collections.
    def initialize(cache:, name:, serializer:, hidden: nil, cache_redacted: false, entries_key: DEFAULT_ENTRIES_KEY)
      unless cache.respond_to?(:fetch) && cache.respond_to?(:read_multi) && cache.respond_to?(:invalidate_tags)
        raise ArgumentError, "Strata::Representation cache: #{cache.class} can't keep tags (it has no " \
          "invalidate_tags); use an ActiveSupport::Cache::StrataStore"
      end
      unless name.is_a?(String) && !name.empty? && !name.include?(":") && !name.include?("\0")
        raise ArgumentError, "Strata::Representation name: must be a non-empty String without a colon or a NUL byte, got #{name.inspect}"
      end
      raise ArgumentError, "Strata::Representation #{name} serializer: must respond to call" unless serializer.respond_to?(:call)
      raise ArgumentError, "Strata::Representation #{name} hidden: must respond to call" unless hidden.nil? || hidden.respond_to?(:call)

      @cache = cache
      @name = name.dup.freeze
      @prefix = "#{name}:".freeze
      @serializer = serializer
      @hidden = hidden
      @cache_redacted = cache_redacted ? true : false
      @entries_key = entries_key_name(entries_key)
      @entries_json = JSON.generate(@entries_key).freeze
    end

    # record's JSON as viewer may see it (a String).
    def entry(record, viewer: nil)
      return entry_json(record, viewer, nil) unless listening?(ENTRY_EVENT)

      payload = {name: @name, hits: 0, misses: 0, redacted: 0}
      ActiveSupport::Notifications.instrument(ENTRY_EVENT, payload) { entry_json(record, viewer, payload) }
    end

    # The JSON of records (an Enumerable) as viewer may see them: a list, or with envelope (a
    # Hash), the envelope's JSON object with the list under entries_key, last.
    def collection(records, viewer: nil, envelope: nil, entries_key: @entries_key)
      key_json = entries_key.equal?(@entries_key) ? @entries_json : JSON.generate(entries_key_name(entries_key))
      check_envelope(envelope, entries_key) if envelope
      return collection_json(records, viewer, envelope, key_json, nil) unless listening?(COLLECTION_EVENT)

      payload = {name: @name, hits: 0, misses: 0, redacted: 0, size: 0}
      ActiveSupport::Notifications.instrument(COLLECTION_EVENT, payload) do
        collection_json(records, viewer, envelope, key_json, payload)
      end
    end

    # The cache key of record's full entry: name, a colon, the record's key.
    def cache_key(record)
      @prefix + record_key(record)
    end

    # The tags record's entry is stamped with.
    def cache_tags(record)
      return record.strata_cache_tags if record.respond_to?(:strata_cache_tags)
      raise ArgumentError, no_protocol(record, "strata_cache_tags") unless model?(record)

      [record.cache_tag]
    end

    private

    def entry_json(record, viewer, payload)
      own = record_key(record)
      full_key = @prefix + own
      fields = hidden_fields(viewer, record)
      key = (fields && @cache_redacted) ? redacted_key(own, fields) : full_key
      tags = cache_tags(record)
      built = false
      # The fetch reads the tags' versions before its block, which loads the record again
      # (#fetch_fresh): a hit reads no version, and a soft-stale entry is answered while the
      # caller that takes its claim renders it again.
      json = fetch_fresh(key, tags, nil, record, reloads?) do |fresh|
        built = true
        fill(fresh, full_key, key, fields, tags)
      end
      json = redact(json, fields) if fields && key.equal?(full_key)
      if payload
        payload[built ? :misses : :hits] += 1
        payload[:redacted] += 1 if fields
      end
      json
    end

    def collection_json(records, viewer, envelope, key_json, payload)
      records = records.to_a
      owns = records.map { |record| record_key(record) }
      hidden = records.map { |record| hidden_fields(viewer, record) }
      full_keys = owns.map { |own| @prefix + own }
      keys = full_keys
      if @cache_redacted
        keys = owns.each_with_index.map { |own, index| hidden[index] ? redacted_key(own, hidden[index]) : full_keys[index] }
      end
      # A soft-stale entry comes back as a miss (revalidate:), which its fetch answers or renders
      # again.
      found = if keys.empty? then NONE
      elsif reloads? then @cache.read_multi(*keys, revalidate: true)
      else @cache.read_multi(*keys)
      end
      missing = records.each_index.reject { |index| found[keys[index]] }
      unless missing.empty?
        tags = missing.to_h { |index| [index, cache_tags(records[index])] }
        as_of = @cache.tag_versions(tags.values.flatten.uniq) if reloads?
        fresh = nil # loaded again once, for every miss, at the first that runs its block
        reload = -> { fresh ||= reloaded(missing.map { |index| records[index] }) } if reloads?
      end
      parts = records.each_with_index.map do |record, index|
        key = keys[index]
        full_key = full_keys[index]
        fields = hidden[index]
        unless (json = found[key])
          json = fetch_fresh(key, tags[index], as_of, record, reload) { |loaded| fill(loaded, full_key, key, fields, tags[index]) }
        end
        (fields && key.equal?(full_key)) ? redact(json, fields) : json
      end
      misses = missing.size
      if payload
        payload[:misses] = misses
        payload[:hits] = records.size - misses
        payload[:redacted] = hidden.count { |fields| fields }
        payload[:size] = records.size
      end
      assemble(parts, envelope, key_json)
    end

    # Raised out of a fetch's block when the record it would render was deleted since it was
    # loaded: nothing is written, and the record as loaded is rendered without the cache.
    class Gone < StandardError; end
    private_constant :Gone

    # Whether entries are built from records loaded again after their tag versions were read
    # (the cache has StrataStore#tag_versions; stand-ins without it render what they are given).
    def reloads?
      @cache.respond_to?(:tag_versions)
    end

    # The JSON under key: read through the cache (tags, stamped as_of when given, else with the
    # versions the fetch reads before its block), its block given the record loaded again
    # (reload: a lambda giving {record => loaded again}, for a collection's misses; true: the
    # record alone). The record given was loaded before the versions were read: a change
    # committed in between is in what is loaded again, and one committed after them makes the
    # entry miss. Without reload, record itself.
    def fetch_fresh(key, tags, as_of, record, reload = nil)
      return @cache.fetch(key, tags: tags) { yield record } unless reload

      @cache.fetch(key, tags: tags, **(as_of ? {as_of: as_of} : NONE)) do
        loaded = (reload.equal?(true) ? reloaded([record]) : reload.call)[record]
        raise Gone unless loaded

        yield loaded
      end
    rescue Gone
      render(record)
    end

    # {record => the same row loaded again (nil when it is gone)} for Active Record records,
    # with the associations the records given had loaded preloaded again (nested ones too), so
    # the serializer reads what it would have read; one query per class and association. Other
    # records (the key protocol) are their own.
    def reloaded(records)
      fresh = {}.compare_by_identity
      records.group_by(&:class).each do |klass, group|
        next group.each { |record| fresh[record] = record } unless model?(group.first)

        by_id = klass.unscoped.where(klass.primary_key => group.map(&:id)).to_a.index_by(&:id)
        associations = loaded_associations(group)
        unless associations.empty? || by_id.empty?
          ActiveRecord::Associations::Preloader.new(records: by_id.values, associations: associations).call
        end
        group.each { |record| fresh[record] = by_id[record.id] }
      end
      fresh
    end

    # The associations loaded on records (of one class), for the Preloader: [:tags, {owner:
    # [:team]}]. Nested up to MAX_PRELOAD_DEPTH.
    def loaded_associations(records, depth = 0)
      return [] if depth >= MAX_PRELOAD_DEPTH

      records.first.class.reflect_on_all_associations.filter_map do |reflection|
        loaded = records.select { |record| record.association(reflection.name).loaded? }
        next if loaded.empty?

        targets = loaded.flat_map { |record| Array(record.association(reflection.name).target) }.compact
        nested = targets.empty? ? [] : loaded_associations(targets.select { |target| target.instance_of?(targets.first.class) }, depth + 1)
        nested.empty? ? reflection.name : {reflection.name => nested}
      end
    end

    # record's key: its strata_cache_key, or its Strata::Model default ("table/id").
    def record_key(record)
      if record.respond_to?(:strata_cache_key)
        key = record.strata_cache_key
        return key if key.is_a?(String) && !key.empty?

        raise ArgumentError, "#{record.class}#strata_cache_key must return a non-empty String, got #{key.inspect}"
      end
      raise ArgumentError, no_protocol(record, "strata_cache_key") unless model?(record)

      id = record.id
      raise ArgumentError, "#{record.class}: a record without an id (not saved) has no cache key" if id.nil?

      "#{record.class.table_name}/#{id}"
    end

    # The key of the copy without fields of the record whose key is own (cache_redacted): name, a
    # NUL byte, the fields as a JSON list, a colon, own. A name holds neither a colon nor a NUL
    # byte and a JSON list ends where it ends, so no full entry's key and no other copy's is
    # the same.
    def redacted_key(own, fields)
      "#{@name}\0#{JSON.generate(fields.uniq.sort)}:#{own}"
    end

    # What the cache stores under key on a miss: the record's full JSON when key is its full
    # key; else (a redacted copy, cache_redacted) the full JSON, read through the cache, without
    # fields: the copy is stamped with what the full entry was built from.
    def fill(record, full_key, key, fields, tags)
      return render(record) if key.equal?(full_key)

      redact(@cache.fetch(full_key, tags: tags) { render(record) }, fields)
    end

    # record's full JSON, built by the serializer. Its values go through as_json first, as
    # Rails' render json: does (a Time becomes ISO 8601, a Symbol a String).
    def render(record)
      data = @serializer.call(record)
      return JSON.generate(data.as_json) if data.is_a?(Hash)

      raise TypeError, "Strata::Representation #{@name}: the serializer returned a #{data.class} for a #{record.class}, not a Hash"
    end

    # The fields hidden from viewer on record, as an Array of Strings; nil when there are none.
    def hidden_fields(viewer, record)
      return nil unless @hidden

      fields = @hidden.call(viewer, record)
      return nil if fields.nil? || (fields.respond_to?(:empty?) && fields.empty?)

      fields.is_a?(Array) ? fields.map(&:to_s) : [fields.to_s]
    end

    # json (a full JSON object) without fields: parsed, cut and generated again.
    def redact(json, fields)
      data = JSON.parse(json)
      fields.each { |field| data.delete(field) }
      JSON.generate(data)
    end

    # The list of entry strings, joined; inside envelope when there is one. The envelope is
    # generated once (as render does) and the list goes before its closing brace, under key_json
    # (the entries key as a JSON string).
    def assemble(parts, envelope, key_json)
      list = parts.join(",")
      return "[#{list}]" unless envelope

      head = JSON.generate(envelope.as_json)
      json = String.new(capacity: head.bytesize + key_json.bytesize + list.bytesize + 8, encoding: Encoding::UTF_8)
      json << head.byteslice(0, head.bytesize - 1)
      json << "," unless envelope.empty?
      json << key_json << ":[" << list << "]}"
    end

    def check_envelope(envelope, entries_key)
      raise ArgumentError, "Strata::Representation #{@name} envelope: must be a Hash, got #{envelope.class}" unless envelope.is_a?(Hash)
      return unless envelope.key?(entries_key.to_s) || envelope.key?(entries_key.to_sym)

      raise ArgumentError, "Strata::Representation #{@name} envelope: has a #{entries_key.to_s.inspect} key already (the entries go there)"
    end

    # entries_key as a String, checked.
    def entries_key_name(entries_key)
      return entries_key.to_s.freeze if (entries_key.is_a?(String) || entries_key.is_a?(Symbol)) && !entries_key.empty?

      raise ArgumentError, "Strata::Representation entries_key: must be a non-empty String or Symbol, got #{entries_key.inspect}"
    end

    # Whether record is an Active Record model with Strata::Model (not loaded: no record is).
    def model?(record)
      !Strata.autoload?(:Model) && record.is_a?(Strata::Model)
    end

    def no_protocol(record, method)
      "#{record.class} has no representation key: it responds to no #{method} and is no " \
        "Active Record model with Strata::Model"
    end

    def listening?(event)
      ActiveSupport::Notifications.notifier.listening?(event)
    end
  end
end
