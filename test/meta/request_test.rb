# frozen_string_literal: true

require "test_helper"
require "strata/meta"

# Exact request bytes for every command and flag; no server involved.
class MetaRequestTest < Minitest::Test
  Request = Strata::Meta::Request
  # mg with none of its default reply flags, so one flag can be checked alone.
  BARE = {value: false, flags: false, cas: false}.freeze

  def b64(bytes)
    [bytes.b].pack("m0")
  end

  # --- mg ------------------------------------------------------------------------------------

  def test_mg_defaults_ask_for_value_client_flags_and_cas
    assert_equal "mg foo v f c\r\n".b, Request.mg("foo")
  end

  def test_mg_returns_a_binary_string
    request = Request.mg("foo")

    assert_equal Encoding::BINARY, request.encoding
    refute_predicate request, :frozen?
  end

  # The builders of the client's hot paths send what the general one would.
  def test_mg_value_mg_lease_and_ms_value_match_the_general_builders
    ["foo", "foo".b, "ключ", "with space", "del\x7f", "x" * 250, "\xFF\x00".b, "\xFFk".b, "x" * 251, "a b" * 70].each do |key|
      assert_equal Request.mg(key, flags: false, cas: false), Request.mg_value(key).b, key.inspect
      assert_equal Request.mg(key, flags: false, lease_ttl: 30), Request.mg_lease(key, 30).b, key.inspect
      assert_equal Request.mg(key, flags: false), Request.mg_lease(key, nil).b, key.inspect
      [0, 60, -1].each do |ttl|
        assert_equal Request.ms_header(key, 5, ttl: ttl), Request.ms_value(key, 5, ttl).b, key.inspect
      end
    end
    ["", :foo, nil].each do |key|
      assert_raises(ArgumentError) { Request.mg_value(key) }
      assert_raises(ArgumentError) { Request.ms_value(key, 5, 0) }
    end
    assert_raises(ArgumentError) { Request.mg_lease("k", 2**31) }
    assert_raises(ArgumentError) { Request.ms_value("k", 5, 2**31) }
    assert_raises(ArgumentError) { Request.ms_value("k", -1, 0) }
    assert_raises(ArgumentError) { Request.ms_value("k", 5, 1.5) }
  end

  def test_mg_with_no_reply_flags
    assert_equal "mg foo\r\n".b, Request.mg("foo", value: false, flags: false, cas: false)
  end

  def test_mg_each_reply_flag
    {
      ttl_remaining: " t", size: " s", return_key: " k", hit_before: " h", last_access: " l", no_bump: " u"
    }.each do |keyword, flag|
      assert_equal "mg foo#{flag}\r\n".b, Request.mg("foo", **BARE, **{keyword => true}),
        keyword.to_s
    end
  end

  def test_mg_item_changing_flags
    assert_equal "mg foo v N30\r\n".b, Request.mg("foo", flags: false, cas: false, lease_ttl: 30)
    assert_equal "mg foo v R15\r\n".b, Request.mg("foo", flags: false, cas: false, recache_ttl: 15)
    assert_equal "mg foo v T600\r\n".b, Request.mg("foo", flags: false, cas: false, touch_ttl: 600)
    assert_equal "mg foo v N0\r\n".b, Request.mg("foo", flags: false, cas: false, lease_ttl: 0)
  end

  def test_mg_opaque_and_quiet
    assert_equal "mg foo v O42 q\r\n".b, Request.mg("foo", flags: false, cas: false, opaque: 42, quiet: true)
    assert_equal "mg foo v Oabc\r\n".b, Request.mg("foo", flags: false, cas: false, opaque: "abc")
  end

  def test_mg_every_flag_in_order
    request = Request.mg("foo", ttl_remaining: true, size: true, return_key: true, hit_before: true,
      last_access: true, no_bump: true, lease_ttl: 30, recache_ttl: 10, touch_ttl: 60, opaque: 9, quiet: true)

    assert_equal "mg foo v f c t s k h l u N30 R10 T60 O9 q\r\n".b, request
  end

  def test_mg_rejects_non_integer_and_out_of_range_ttls
    assert_raises(ArgumentError) { Request.mg("foo", lease_ttl: "30") }
    assert_raises(ArgumentError) { Request.mg("foo", recache_ttl: 1.5) }
    assert_raises(ArgumentError) { Request.mg("foo", touch_ttl: 2**31) }
  end

  def test_opaque_must_be_a_short_single_token
    assert_equal "mg foo O#{"o" * 31}\r\n".b,
      Request.mg("foo", value: false, flags: false, cas: false, opaque: "o" * 31)
    assert_raises(ArgumentError) { Request.mg("foo", opaque: "o" * 32) }
    assert_raises(ArgumentError) { Request.mg("foo", opaque: "a b") }
    assert_raises(ArgumentError) { Request.mg("foo", opaque: "a\r\nmn") }
    assert_raises(ArgumentError) { Request.mg("foo", opaque: :sym) }
  end

  # --- keys ----------------------------------------------------------------------------------

  def test_plain_key_of_250_bytes_goes_as_is
    key = "k" * 250

    assert_equal "mg #{key}\r\n".b, Request.mg(key, value: false, flags: false, cas: false)
  end

  def test_utf8_key_without_spaces_goes_as_is
    key = "clé:日本"

    assert_equal "mg ".b + key.b + " v\r\n".b, Request.mg(key, flags: false, cas: false)
  end

  def test_key_with_space_goes_base64
    assert_equal "mg #{b64("a b")} b v\r\n".b, Request.mg("a b", flags: false, cas: false)
  end

  def test_utf8_key_with_space_goes_base64_as_its_bytes
    key = "clé 日本"

    assert_equal "mg #{b64(key)} b v\r\n".b, Request.mg(key, flags: false, cas: false)
  end

  def test_key_with_control_bytes_goes_base64
    ["a\r\nb", "a\tb", "a\x00b", "a\x7fb", "\x01"].each do |key|
      assert_equal "mg #{b64(key)} b\r\n".b, Request.mg(key, value: false, flags: false, cas: false), key.inspect
    end
  end

  def test_binary_key_with_nul_goes_base64
    key = [0, 255, 32, 13, 10, 1].pack("C*")

    assert_equal "mg AP8gDQoB b\r\n".b, Request.mg(key, value: false, flags: false, cas: false)
  end

  def test_high_bytes_without_controls_go_as_is
    key = "\xff\xfe".b

    assert_equal "mg \xff\xfe\r\n".b, Request.mg(key, value: false, flags: false, cas: false)
  end

  def test_base64_key_fits_while_its_encoding_is_at_most_250_bytes
    # The server checks the token it receives, so 186 raw bytes (248 encoded) is the longest.
    key = "a b".ljust(186, "x")

    assert_equal "mg #{b64(key)} b\r\n".b, Request.mg(key, value: false, flags: false, cas: false)
    assert_equal 248, b64(key).bytesize
  end

  # Past that, the key goes as its digest form: a prefix, ":sha256:" and the whole key's SHA-256,
  # itself base64 when the prefix has a space or control byte.
  def test_key_whose_base64_would_exceed_250_bytes_goes_as_its_digest_form
    key = "a b".ljust(187, "x")
    digest_form = key.byteslice(0, 114) + ":sha256:" + Digest::SHA256.hexdigest(key)

    assert_equal "mg #{b64(digest_form)} b\r\n".b, Request.mg(key, value: false, flags: false, cas: false)
    assert_equal 248, b64(digest_form).bytesize
  end

  def test_key_over_250_bytes_without_spaces_goes_as_its_digest_form
    key = "k" * 251
    digest_form = "k" * 114 + ":sha256:" + Digest::SHA256.hexdigest(key)

    assert_equal "mg #{digest_form} v\r\n".b, Request.mg(key, flags: false, cas: false)
    assert_equal "mg #{digest_form} v\r\n".b, Request.mg_value(key)
    assert_equal "ms #{digest_form} 2 T0\r\n".b, Request.ms_value(key, 2, 0)
  end

  def test_digest_forms_differ_past_their_prefix_and_are_the_same_every_time
    common = "geocode/" + "a b " * 60
    one = Request.md(common + "1")
    other = Request.md(common + "2")

    refute_equal one, other
    assert_equal one, Request.md((common + "1").dup)
    assert_equal one, Request.md((common + "1").b), "a key is its bytes, whatever its encoding"
  end

  def test_nil_empty_and_non_string_keys_raise
    assert_raises(ArgumentError) { Request.mg(nil) }
    assert_raises(ArgumentError) { Request.mg("") }
    assert_raises(ArgumentError) { Request.mg(:foo) }
    assert_raises(ArgumentError) { Request.ms_header("", 1) }
    assert_raises(ArgumentError) { Request.md(nil) }
    assert_raises(ArgumentError) { Request.ma("") }
  end

  def test_every_command_puts_the_b_flag_after_the_key
    key = "a b"
    encoded = b64(key)

    assert_equal "ms #{encoded} 5 b\r\n".b, Request.ms_header(key, 5)
    assert_equal "md #{encoded} b\r\n".b, Request.md(key)
    assert_equal "ma #{encoded} b v\r\n".b, Request.ma(key)
  end

  # --- ms ------------------------------------------------------------------------------------

  def test_ms_header_is_the_line_only
    assert_equal "ms foo 5\r\n".b, Request.ms_header("foo", 5)
    assert_equal "ms foo 0\r\n".b, Request.ms_header("foo", 0)
  end

  def test_ms_each_flag
    assert_equal "ms foo 5 T60\r\n".b, Request.ms_header("foo", 5, ttl: 60)
    assert_equal "ms foo 5 F4294967295\r\n".b, Request.ms_header("foo", 5, flags: 2**32 - 1)
    assert_equal "ms foo 5 C12345\r\n".b, Request.ms_header("foo", 5, cas: 12_345)
    assert_equal "ms foo 5 C7 I\r\n".b, Request.ms_header("foo", 5, cas: 7, invalidate: true)
    assert_equal "ms foo 5 c\r\n".b, Request.ms_header("foo", 5, return_cas: true)
    assert_equal "ms foo 5 k\r\n".b, Request.ms_header("foo", 5, return_key: true)
    assert_equal "ms foo 5 O1\r\n".b, Request.ms_header("foo", 5, opaque: 1)
    assert_equal "ms foo 5 q\r\n".b, Request.ms_header("foo", 5, quiet: true)
  end

  def test_ms_modes
    {set: "MS", add: "ME", replace: "MR", append: "MA", prepend: "MP"}.each do |mode, token|
      assert_equal "ms foo 5 #{token}\r\n".b, Request.ms_header("foo", 5, mode: mode)
    end
    assert_raises(ArgumentError) { Request.ms_header("foo", 5, mode: :cas) }
  end

  def test_ms_every_flag_in_order
    request = Request.ms_header("foo", 5, ttl: 0, flags: 3, cas: 9, invalidate: true, mode: :set, return_cas: true,
      return_key: true, opaque: "x", quiet: true)

    assert_equal "ms foo 5 T0 F3 C9 I MS c k Ox q\r\n".b, request
  end

  def test_ms_rejects_bad_numbers_and_invalidate_without_cas
    assert_raises(ArgumentError) { Request.ms_header("foo", -1) }
    assert_raises(ArgumentError) { Request.ms_header("foo", "5") }
    assert_raises(ArgumentError) { Request.ms_header("foo", 5, flags: 2**32) }
    assert_raises(ArgumentError) { Request.ms_header("foo", 5, flags: -1) }
    assert_raises(ArgumentError) { Request.ms_header("foo", 5, cas: -1) }
    assert_raises(ArgumentError) { Request.ms_header("foo", 5, cas: 2**64) }
    assert_raises(ArgumentError) { Request.ms_header("foo", 5, ttl: "60\r\nflush_all") }
    assert_raises(ArgumentError) { Request.ms_header("foo", 5, invalidate: true) }
  end

  # --- md ------------------------------------------------------------------------------------

  def test_md_plain_and_each_flag
    assert_equal "md foo\r\n".b, Request.md("foo")
    assert_equal "md foo I\r\n".b, Request.md("foo", invalidate: true)
    assert_equal "md foo I T30\r\n".b, Request.md("foo", invalidate: true, ttl: 30)
    assert_equal "md foo C5\r\n".b, Request.md("foo", cas: 5)
    assert_equal "md foo k\r\n".b, Request.md("foo", return_key: true)
    assert_equal "md foo O3\r\n".b, Request.md("foo", opaque: 3)
    assert_equal "md foo q\r\n".b, Request.md("foo", quiet: true)
    assert_equal "md foo I T30 C5 k O3 q\r\n".b,
      Request.md("foo", invalidate: true, ttl: 30, cas: 5, return_key: true, opaque: 3, quiet: true)
  end

  def test_md_ttl_needs_invalidate
    assert_raises(ArgumentError) { Request.md("foo", ttl: 30) }
  end

  # --- ma ------------------------------------------------------------------------------------

  def test_ma_defaults_increment_by_one_and_return_the_value
    assert_equal "ma foo v\r\n".b, Request.ma("foo")
  end

  def test_ma_each_flag
    assert_equal "ma foo\r\n".b, Request.ma("foo", return_value: false)
    assert_equal "ma foo D5 v\r\n".b, Request.ma("foo", delta: 5)
    assert_equal "ma foo D0 v\r\n".b, Request.ma("foo", delta: 0)
    assert_equal "ma foo MD v\r\n".b, Request.ma("foo", mode: :decr)
    assert_equal "ma foo N0 v\r\n".b, Request.ma("foo", vivify_ttl: 0)
    assert_equal "ma foo N60 J10 v\r\n".b, Request.ma("foo", vivify_ttl: 60, initial: 10)
    assert_equal "ma foo T90 v\r\n".b, Request.ma("foo", ttl: 90)
    assert_equal "ma foo C4 v\r\n".b, Request.ma("foo", cas: 4)
    assert_equal "ma foo v t c\r\n".b, Request.ma("foo", return_ttl: true, return_cas: true)
    assert_equal "ma foo v O8 q\r\n".b, Request.ma("foo", opaque: 8, quiet: true)
  end

  def test_ma_every_flag_in_order
    request = Request.ma("foo", delta: 2**64 - 1, mode: :decr, vivify_ttl: 5, initial: 0, ttl: 6, cas: 7,
      return_ttl: true, return_cas: true, opaque: "z", quiet: true)

    assert_equal "ma foo MD D18446744073709551615 N5 J0 T6 C7 v t c Oz q\r\n".b, request
  end

  def test_ma_rejects_bad_arguments
    assert_raises(ArgumentError) { Request.ma("foo", mode: :mul) }
    assert_raises(ArgumentError) { Request.ma("foo", delta: -1) }
    assert_raises(ArgumentError) { Request.ma("foo", delta: 2**64) }
    assert_raises(ArgumentError) { Request.ma("foo", initial: 1) }
  end
end
