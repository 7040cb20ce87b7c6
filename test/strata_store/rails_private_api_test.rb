# frozen_string_literal: true

require_relative "store_case"

# StrataStore reaches into Active Support's private cache API: it overrides the entry methods a
# store implements, calls the helpers a store's fetch is built from, and prepends the local
# cache strategy. None of that is public, so a Rails release may rename or reshape it. This test
# names every reach and the shape Strata relies on, so that a change fails here, loudly and by
# name, before it shows as a wrong value somewhere else.
class StrataStoreRailsPrivateApiTest < Minitest::Test
  STORE = ActiveSupport::Cache::Store
  LOCAL_CACHE = ActiveSupport::Cache::Strategy::LocalCache

  # The private methods of Store that StrataStore overrides or calls, with the parameters it
  # passes or accepts ([kind, name] as Method#parameters gives them).
  STORE_METHODS = {
    read_entry: [%i[req key], %i[keyrest options]],
    write_entry: [%i[req key], %i[req entry], %i[keyrest options]],
    delete_entry: [%i[req key], %i[keyrest options]],
    read_multi_entries: [%i[req names], %i[keyrest options]],
    write_multi_entries: [%i[req hash], %i[keyrest options]],
    delete_multi_entries: [%i[req entries], %i[keyrest options]],
    serialize_entry: [%i[req entry], %i[keyrest options]],
    deserialize_entry: [%i[req payload], [:keyrest]],
    normalize_key: [%i[req key], %i[opt options]],
    normalize_version: [%i[req key], %i[opt options]],
    merged_options: [%i[req call_options]],
    expanded_key: [%i[req key]],
    key_matcher: [%i[req pattern], %i[req options]],
    instrument: [%i[req operation], %i[req key], %i[opt options], %i[block block]],
    instrument_multi: [%i[req operation], %i[req keys], %i[opt options], %i[block block]],
    _instrument: [%i[req operation], %i[key multi], %i[key options], %i[keyrest payload], %i[block block]]
  }.freeze

  # Public from Active Support 8.1 on.
  PUBLIC_SINCE_8_1 = %i[local_cache].freeze

  # The local cache strategy's private methods StrataStore overrides or calls.
  LOCAL_CACHE_METHODS = {
    local_cache: [],
    read_serialized_entry: [%i[req key], %i[key raw], %i[keyrest options]],
    write_serialized_entry: [%i[req key], %i[req payload], [:keyrest]]
  }.freeze

  # Action View's cache helper: Strata::Fragments overrides its private fragment_for (and calls
  # super with the same arguments) and calls the controller's combined_fragment_cache_key.
  def test_the_fragment_path_strata_overrides_keeps_its_shape
    require "action_view"
    require "action_controller"
    assert ActionView::Base.include?(Strata::Fragments), "loading ActionView::Base ran the hook that prepends it"
    helper = ActionView::Helpers::CacheHelper
    assert helper.private_method_defined?(:fragment_for), "ActionView::Helpers::CacheHelper#fragment_for is gone or public"
    override = helper.instance_method(:fragment_for)
    assert_equal Strata::Fragments, override.owner, "Strata::Fragments is prepended"
    assert_equal [%i[opt name], %i[opt options], %i[block block]], override.super_method.parameters, "fragment_for changed"
    assert_equal [%i[req key]], AbstractController::Caching::Fragments.instance_method(:combined_fragment_cache_key).parameters
  end

  # Strata::SQLiteBusyHandler (prepended by the Railtie before Active Record 8.0) overrides the
  # SQLite adapter's private configure_connection and reads its @config and @raw_connection.
  def test_the_sqlite_adapter_method_strata_overrides_keeps_its_shape
    require "active_record"
    require "active_record/connection_adapters/sqlite3_adapter"
    adapter = ActiveRecord::ConnectionAdapters::SQLite3Adapter
    assert adapter.private_method_defined?(:configure_connection), "SQLite3Adapter#configure_connection is gone or public"
    assert_equal [], adapter.instance_method(:configure_connection).parameters
    connection = adapter.new(adapter: "sqlite3", database: ":memory:", timeout: 100)
    connection.execute("SELECT 1")
    assert_kind_of SQLite3::Database, connection.instance_variable_get(:@raw_connection)
    assert_equal 100, connection.instance_variable_get(:@config)[:timeout]
  ensure
    connection&.disconnect!
  end

  def test_the_store_methods_strata_overrides_or_calls_keep_their_shape
    STORE_METHODS.each do |name, parameters|
      assert STORE.private_method_defined?(name), "ActiveSupport::Cache::Store##{name} is gone or public"
      assert_equal parameters, shape(STORE.instance_method(name)), "ActiveSupport::Cache::Store##{name} changed"
    end
  end

  # The lists above are the whole of it: every private method of Store or of the local cache
  # strategy that StrataStore or a module of its own overrides is listed, so its shape is
  # checked. (Its fetch and fetch_multi are its own, Fetch: Store#fetch and the helpers it is
  # built from are neither called nor overridden.)
  def test_every_private_method_strata_overrides_is_listed
    own = ActiveSupport::Cache::StrataStore.ancestors.take_while { |mod| mod != STORE } - [LOCAL_CACHE]
    overridden = own.flat_map { |mod| mod.private_instance_methods(false) } & (STORE.private_instance_methods + LOCAL_CACHE.private_instance_methods)
    assert_empty overridden.uniq - [:initialize] - STORE_METHODS.keys - LOCAL_CACHE_METHODS.keys
  end

  def test_the_local_cache_methods_strata_overrides_or_calls_keep_their_shape
    assert_includes ActiveSupport::Cache::StrataStore.ancestors, LOCAL_CACHE
    LOCAL_CACHE_METHODS.each do |name, parameters|
      assert LOCAL_CACHE.private_method_defined?(name) || (PUBLIC_SINCE_8_1.include?(name) && LOCAL_CACHE.public_method_defined?(name)),
        "Strategy::LocalCache##{name} is gone or public"
      assert_equal parameters, shape(LOCAL_CACHE.instance_method(name)), "Strategy::LocalCache##{name} changed"
    end
  end

  # Before 8.1, StrataStore::LocalCacheMiddleware (new_local_cache, unset_local_cache) reaches
  # into the local cache strategy's registry and the store's key in it, as 8.1's own do.
  def test_the_local_cache_internals_used_before_8_1_keep_their_shape
    local_cache = LOCAL_CACHE
    assert_equal [%i[req local_cache_key], %i[req value]], shape(local_cache::LocalCacheRegistry.method(:set_cache_for))
    assert_equal [%i[req local_cache_key]], shape(local_cache::LocalCacheRegistry.method(:cache_for))
    assert_equal [], shape(local_cache::LocalStore.instance_method(:initialize))
    assert local_cache.private_method_defined?(:local_cache_key), "Strategy::LocalCache#local_cache_key is gone or public"
  end

  # Codec builds entries itself, and Fetch hands a fetch block the options object the base
  # fetch would, and reads expiry and version off an entry as the base fetch does.
  def test_entries_write_options_and_deserialization_errors_are_what_strata_builds
    parameters = ActiveSupport::Cache::Entry.instance_method(:initialize).parameters
    %i[version expires_in expires_at].each do |keyword|
      assert_includes parameters, [:key, keyword], "Entry.new no longer takes #{keyword}:"
    end
    entry = ActiveSupport::Cache::Entry.new("v", version: "1", expires_at: 1.0)
    assert_equal ["v", "1", 1.0], [entry.value, entry.version, entry.expires_at]
    refute entry.compressed?
    assert entry.expired?
    assert entry.mismatched?("2")
    entry.expires_at = Time.now.to_f + 60
    refute entry.expired?

    options = ActiveSupport::Cache::WriteOptions.new({expires_in: 5})
    options.expires_in = 7
    assert_equal 7, options.expires_in
    assert_operator ActiveSupport::Cache::DeserializationError, :<, StandardError
  end

  private

  # method's parameters, an anonymous rest or block written as Ruby 3.1 reports it: 3.2 and later
  # name them (`[:keyrest, :**]`), 3.1 does not (`[:keyrest]`).
  def shape(method)
    method.parameters.map { |kind, name| %i[* ** &].include?(name) ? [kind] : [kind, name].compact }
  end
end
