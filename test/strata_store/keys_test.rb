# frozen_string_literal: true

require_relative "store_case"

class StrataStoreKeysTest < Strata::StoreCase
  # A key object the way Active Record models are: it names itself through cache_key.
  Keyed = Struct.new(:cache_key)

  def test_a_nil_key_is_refused_naming_the_problem
    error = assert_raises(ArgumentError) { store.read(nil) }

    assert_match(/nil/, error.message)
    assert_raises(ArgumentError) { store.write(nil, 1) }
    assert_raises(ArgumentError) { store.fetch(nil) { 1 } }
  end

  def test_an_empty_key_is_refused_naming_the_problem
    error = assert_raises(ArgumentError) { store.write("", 1) }

    assert_match(/empty/, error.message)
    assert_raises(ArgumentError) { store.read([]) }
  end

  def test_utf8_keys_work
    store.write("clé/日本語/🙂", "value")

    assert_equal "value", store.read("clé/日本語/🙂")
  end

  def test_binary_keys_work_and_differ_from_each_other
    store.write("\xFF\x00\x01".b, "one")
    store.write("\xFF\x00\x02".b, "two")

    assert_equal "one", store.read("\xFF\x00\x01".b)
    assert_equal "two", store.read("\xFF\x00\x02".b)
  end

  def test_a_binary_key_works_under_a_utf8_namespace
    cache = build_store(namespace: "espace-é")
    cache.write("\xFF\xFE".b, "value")

    assert_equal "value", cache.read("\xFF\xFE".b)
  end

  def test_the_same_text_in_two_encodings_is_the_same_key
    store.write("plain", "value")

    assert_equal "value", store.read("plain".b)
    assert_equal "value", store.read(:plain)
  end

  def test_keys_with_spaces_and_control_characters_are_kept_apart
    store.write("a b", 1)
    store.write("a\nb", 2)
    store.write("a%20b", 3)

    assert_equal [1, 2, 3], [store.read("a b"), store.read("a\nb"), store.read("a%20b")]
  end

  def test_long_keys_fit_the_tier_and_stay_distinct
    first = "k" * 300 + "1"
    second = "k" * 300 + "2"
    store.write(first, "first")
    store.write(second, "second")

    assert_equal "first", store.read(first)
    assert_equal "second", store.read(second)
    assert_operator tier_key(store, first).bytesize, :<=, 250
    assert tier_key(store, first).start_with?("k" * 100)
  end

  def test_a_long_multibyte_key_is_cut_on_bytes
    key = "日" * 200
    store.write(key, "value")

    assert_equal "value", store.read(key)
    assert_operator tier_key(store, key).bytesize, :<=, 250
  end

  def test_a_namespaced_key_is_shortened_after_the_namespace_is_added
    cache = build_store(namespace: "n" * 100)
    key = "k" * 200
    cache.write(key, "value")

    assert_equal "value", cache.read(key)
    assert_operator tier_key(cache, key).bytesize, :<=, 250
  end

  def test_arrays_hashes_and_objects_expand_into_keys
    store.write(["views", 1, :show], "array")
    store.write({b: 2, a: 1}, "hash")
    store.write(Keyed.new("models/7"), "object")

    assert_equal "array", store.read("views/1/show")
    assert_equal "hash", store.read("a=1/b=2")
    assert_equal "object", store.read("models/7")
  end
end
