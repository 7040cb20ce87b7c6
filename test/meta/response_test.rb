# frozen_string_literal: true

require "test_helper"
require "strata/meta"

# Parsing reply lines: every status, every flag, error lines and garbage; no server involved.
class MetaResponseTest < Minitest::Test
  Response = Strata::Meta::Response

  def parse(line, command = nil)
    Response.parse(line.b, command)
  end

  # --- statuses ------------------------------------------------------------------------------

  def test_statuses
    {
      "HD" => :hit, "EN" => :miss, "NF" => :not_found, "NS" => :not_stored, "EX" => :exists, "MN" => :noop
    }.each do |line, status|
      result = parse(line)

      assert_equal status, result.status, line
      refute_predicate result, :value?, line
      assert_nil result.value_length, line
    end
  end

  def test_va_carries_the_value_length
    result = parse("VA 12")

    assert_equal :hit, result.status
    assert_predicate result, :value?
    assert_equal 12, result.value_length
    assert_equal 0, parse("VA 0").value_length
  end

  def test_result_is_frozen_and_absent_flags_are_nil_or_false
    result = parse("HD")

    assert_predicate result, :frozen?
    assert_raises(FrozenError) { result.cas = 1 }
    assert_nil result.cas
    assert_nil result.client_flags
    assert_nil result.ttl
    assert_nil result.key
    assert_nil result.opaque
    assert_nil result.size
    assert_nil result.hit_before
    assert_nil result.last_access
    refute_predicate result, :won?
    refute_predicate result, :stale?
    refute_predicate result, :lease_sent?
    refute result.base64_key
  end

  # --- flags ---------------------------------------------------------------------------------

  def test_every_numeric_flag
    result = parse("VA 3 f5 c1963420 t-1 s3 l7 h1 kfoo O123")

    assert_equal 3, result.value_length
    assert_equal 5, result.client_flags
    assert_equal 1_963_420, result.cas
    assert_equal(-1, result.ttl)
    assert_equal 3, result.size
    assert_equal 7, result.last_access
    assert result.hit_before
    assert_equal "foo", result.key
    assert_equal "123", result.opaque
  end

  def test_largest_numbers
    result = parse("HD c18446744073709551615 f4294967295")

    assert_equal 2**64 - 1, result.cas
    assert_equal 2**32 - 1, result.client_flags
  end

  def test_hit_before_zero_is_false
    assert_equal false, parse("HD h0").hit_before
  end

  def test_lease_flags_in_any_order
    won = parse("VA 0 c7 t30 W")

    assert_predicate won, :won?
    refute_predicate won, :lease_sent?

    stale_won = parse("VA 3 c9 X W")

    assert_predicate stale_won, :stale?
    assert_predicate stale_won, :won?

    stale_lost = parse("VA 3 c9 Z X")

    assert_predicate stale_lost, :stale?
    assert_predicate stale_lost, :lease_sent?
    refute_predicate stale_lost, :won?
  end

  def test_base64_key_is_decoded_even_when_b_comes_after_k
    result = parse("HD kYSBiAA== b O4")

    assert_equal "a b\x00".b, result.key
    assert result.base64_key
    assert_equal "4", result.opaque
  end

  def test_plain_key_stays_as_sent_bytes
    result = parse("EN kclé")

    assert_equal "clé".b, result.key
    assert_equal Encoding::BINARY, result.key.encoding
  end

  def test_miss_can_carry_key_and_opaque
    result = parse("EN kfoo O9")

    assert_equal :miss, result.status
    assert_equal "foo", result.key
    assert_equal "9", result.opaque
  end

  def test_empty_opaque
    assert_equal "", parse("EN O").opaque
  end

  def test_a_utf8_tagged_line_parses_like_a_binary_one
    assert_equal 5, Response.parse("HD c5", :mg).cas
  end

  # --- expected statuses per command ---------------------------------------------------------

  def test_each_command_accepts_only_its_statuses
    assert_equal :hit, parse("VA 1", :mg).status
    assert_equal :miss, parse("EN", :mg).status
    assert_equal :exists, parse("EX", :ms).status
    assert_equal :not_stored, parse("NS", :ma).status
    assert_equal :not_found, parse("NF", :md).status
    assert_equal :noop, parse("MN", :mn).status

    [["MN", :mg], ["EN", :ms], ["NS", :md], ["EN", :ma], ["HD", :mn], ["VA 1", :md]].each do |line, command|
      assert_raises(Strata::Meta::ProtocolError, "#{line} to #{command}") { parse(line, command) }
    end
  end

  def test_unknown_command_is_a_programming_error
    assert_raises(KeyError) { parse("HD", :get) }
  end

  # --- error lines ---------------------------------------------------------------------------

  def test_server_error_carries_the_message
    error = assert_raises(Strata::Meta::ServerError) { parse("SERVER_ERROR object too large for cache", :ms) }

    assert_equal "object too large for cache", error.message
    assert_kind_of Strata::TierError, error
  end

  def test_client_error_carries_the_message
    error = assert_raises(Strata::Meta::ClientError) { parse("CLIENT_ERROR bad command line format") }

    assert_equal "bad command line format", error.message
    assert_kind_of Strata::TierError, error
  end

  def test_bare_error_is_a_client_error
    assert_raises(Strata::Meta::ClientError) { parse("ERROR") }
  end

  def test_garbage_is_a_protocol_error
    ["", " ", "STORED", "VALUE foo 0 3", "ERRORS", "hd", "H", "VA", "VA x", "VA -1", "VA 3x",
      "HD c", "HD cx", "HD c1_000", "HD t--1", "HD Wx", "HD h2", "HD bb", "HD q", "HD k== b",
      "\xff\xfe".b].each do |line|
      error = assert_raises(Strata::Meta::ProtocolError, line.inspect) { parse(line) }
      assert_kind_of Strata::TierError, error
    end
  end

  def test_binary_garbage_in_a_utf8_string_is_a_protocol_error
    assert_raises(Strata::Meta::ProtocolError) { Response.parse(+"\xff\x00 HD") }
  end

  # --- value blocks --------------------------------------------------------------------------

  def test_counter_value
    assert_equal 18_446_744_073_709_551_615, Response.counter_value("18446744073709551615".b)
    assert_raises(Strata::Meta::ProtocolError) { Response.counter_value("12a".b) }
    assert_raises(Strata::Meta::ProtocolError) { Response.counter_value("".b) }
  end

  # The fast paths agree with #parse on the lines they accept and decline everything else.
  def test_fast_paths_match_parse
    {"VA 30" => 30, "VA 0" => 0, "VA 30 c5" => nil, "EN" => nil, "VA" => nil}.each do |line, length|
      length ? assert_equal(length, Response.plain_value_length(line.b), line) : assert_nil(Response.plain_value_length(line.b), line)
    end
    assert_equal [30, 17], Response.value_with_opaque("VA 30 O17".b)
    assert_equal [1_234_567, 0], Response.value_with_opaque("VA 1234567 O0".b)
    parsed = Response.parse("VA 30 O17".b)
    assert_equal [parsed.value_length, parsed.opaque.to_i], Response.value_with_opaque("VA 30 O17".b)
    ["VA 30 O17 X", "VA 30 O17 W", "VA 30 Oab", "VA 30", "VA O17", "HD O17", "VA 30 c1 O17"].each do |line|
      assert_nil Response.value_with_opaque(line.b), line
    end
  end
end
