# frozen_string_literal: true

require "test_helper"
require "strata/entry"

class EntryTest < Minitest::Test
  Entry = Strata::Entry

  def test_a_plain_entry_round_trips
    bytes = Entry.encode("payload", flags: Entry::UTF8)
    entry = Entry.decode(bytes)

    assert_equal "payload".b, entry.payload
    assert_equal Entry::UTF8, entry.kind
    assert_equal Encoding::UTF_8, entry.string_encoding
    assert_equal 0, entry.expires_at
    assert_nil entry.expires_at_seconds
    assert_nil entry.version
    assert_empty entry.stamps
    refute entry.compressed?
    refute entry.expired?
  end

  def test_a_bare_string_that_never_expires_is_read_without_decoding
    assert_equal "caf\u00e9", Entry.plain_string(Entry.encode("caf\u00e9", flags: Entry::UTF8))
    assert_equal Encoding::UTF_8, Entry.plain_string(Entry.encode("x", flags: Entry::UTF8)).encoding
    assert_equal Encoding::BINARY, Entry.plain_string(Entry.encode("\xFF".b, flags: Entry::BINARY)).encoding
    assert_equal Encoding::US_ASCII, Entry.plain_string(Entry.encode("a", flags: Entry::ASCII)).encoding
    assert_equal "", Entry.plain_string(Entry.encode("", flags: Entry::BINARY))
  end

  def test_a_stamped_bare_string_is_read_after_its_stamps_when_the_block_says_so
    bytes = Entry.encode("caf\u00e9", flags: Entry::UTF8, stamps: [[1, 2], [3, 4]])
    asked = 0

    assert_equal "caf\u00e9", Entry.plain_string(bytes) { asked += 1 }
    assert_equal Encoding::UTF_8, Entry.plain_string(bytes) { true }.encoding
    assert_nil Entry.plain_string(bytes) { false }, "the caller's last word"
    assert_equal 1, asked
    assert_equal "v", Entry.plain_string(Entry.encode("v", flags: Entry::UTF8)) { flunk "asked for an unstamped entry" }
    assert_nil Entry.plain_string(Entry.encode("v", flags: Entry::UTF8, stamps: [[1, 2]], expires_at: 1)) { true }
    assert_nil Entry.plain_string(Entry.encode("v", flags: Entry::UTF8, stamps: [[1, 2]], version: "1")) { true }
    assert_nil Entry.plain_string(Entry.encode("v", flags: Entry::SERIALIZED, stamps: [[1, 2]])) { true }
    assert_nil Entry.plain_string(bytes.byteslice(0, Entry::HEADER_BYTES + 16)) { true }, "stamps past the end"
    # the flag without a stamp: malformed, left to decode
    assert_nil Entry.plain_string(Entry.encode("v", flags: Entry::UTF8 | Entry::STAMPED)) { true }
  end

  def test_everything_but_a_bare_string_that_never_expires_is_left_to_decode
    others = [
      Entry.encode("v", flags: Entry::UTF8, expires_at: 1),
      Entry.encode("v", flags: Entry::UTF8, version: ""),
      Entry.encode("v", flags: Entry::UTF8, stamps: [[1, 2]]),
      Entry.encode("v", flags: Entry::UTF8 | Entry::COMPRESSED),
      Entry.encode("v", flags: Entry::SERIALIZED),
      Entry.encode("", flags: Entry::NIL),
      "123",
      Entry.encode("v", flags: Entry::UTF8).byteslice(0, Entry::HEADER_BYTES - 1),
      # a bare String's flags with a version length the flags do not announce: malformed
      Entry.encode("v", flags: Entry::UTF8).tap { |bytes| bytes.setbyte(Entry::VERSION_AT, 1) }
    ]
    others.each { |bytes| assert_nil Entry.plain_string(bytes) { false }, bytes.inspect }
  end

  def test_every_header_field_round_trips
    stamps = [[1, 2], [2**64 - 1, 0], [42, 7]]
    bytes = Entry.encode("\x00\xFF".b, flags: Entry::SERIALIZED | Entry::MESSAGE_PACK | Entry::COMPRESSED,
      expires_at: 1_700_000_000_123, version: "v-ü", stamps: stamps)
    entry = Entry.decode(bytes)

    assert_equal "\x00\xFF".b, entry.payload
    assert entry.compressed?
    assert_equal Entry::SERIALIZED, entry.kind
    assert_equal Entry::MESSAGE_PACK, entry.serializer
    assert_nil entry.string_encoding
    assert_equal 1_700_000_000_123, entry.expires_at
    assert_in_delta 1_700_000_000.123, entry.expires_at_seconds, 0.0001
    assert_equal "v-ü", entry.version
    assert_equal Encoding::UTF_8, entry.version.encoding
    assert_equal stamps, entry.stamps
  end

  def test_an_empty_version_is_kept_apart_from_no_version
    assert_equal "", Entry.decode(Entry.encode("x", version: "")).version
    assert_nil Entry.decode(Entry.encode("x")).version
  end

  def test_the_payload_keeps_its_bytes_whatever_its_encoding
    utf8 = "Grüße, 世界"

    assert_equal utf8.b, Entry.decode(Entry.encode(utf8, flags: Entry::UTF8)).payload
    assert_equal "", Entry.decode(Entry.encode("", flags: Entry::NIL)).payload
  end

  def test_encoded_bytes_are_binary_and_start_with_the_marker
    bytes = Entry.encode("x")

    assert_equal Encoding::BINARY, bytes.encoding
    assert Entry.entry?(bytes)
    refute Entry.counter?(bytes)
  end

  def test_counters_are_told_apart_by_their_first_byte
    assert Entry.counter?("0")
    assert Entry.counter?("18446744073709551615")
    refute Entry.counter?("")
    refute Entry.counter?("-1")
    refute Entry.entry?("12")
  end

  def test_expires_at_is_read_without_decoding_the_rest
    bytes = Entry.encode("x", expires_at: 123_456, version: "v", stamps: [[1, 1]])

    assert_equal 123_456, Entry.expires_at(bytes)
  end

  def test_expiry_compares_against_the_given_time
    entry = Entry.decode(Entry.encode("x", expires_at: 1_000))

    refute entry.expired?(999)
    assert entry.expired?(1_000)
  end

  def test_milliseconds_round_up_and_keep_never_as_zero
    assert_equal 0, Entry.milliseconds(nil)
    assert_equal 1_500, Entry.milliseconds(1.4999)
    assert_equal 2_000, Entry.milliseconds(2)
    assert_equal 1, Entry.milliseconds(-5.0)
  end

  # A Rails entry written with expires_in: Float::INFINITY (or 1e300) expires at that time; it
  # raised FloatDomainError here, or wrapped around the u64 into some nearer time.
  def test_milliseconds_of_times_no_header_can_hold_are_never
    [Float::INFINITY, 1e300, 10**30, Entry::NEVER_AFTER, Float::NAN].each do |seconds|
      assert_equal 0, Entry.milliseconds(seconds), seconds.inspect
    end
    assert_equal (Entry::NEVER_AFTER - 1) * 1000, Entry.milliseconds(Entry::NEVER_AFTER - 1)
    assert_equal 1, Entry.milliseconds(-Float::INFINITY)
    assert_equal 0, Entry.decode(Entry.encode("v", expires_at: Entry.milliseconds(Float::INFINITY))).expires_at
  end

  def test_string_kinds_cover_the_encodings_stored_as_bytes
    assert_equal Entry::UTF8, Entry.string_kind("a")
    assert_equal Entry::BINARY, Entry.string_kind("a".b)
    assert_equal Entry::ASCII, Entry.string_kind(1.to_s)
    assert_nil Entry.string_kind("a".encode(Encoding::UTF_16LE))
  end

  def test_a_version_too_long_for_the_header_is_refused
    assert_raises(ArgumentError) { Entry.encode("x", version: "v" * 65_536) }
  end

  def test_bytes_that_are_not_an_entry_are_corrupt
    ["", "\xE1".b, "plain text", "123", "\xE1\x00short".b].each do |bytes|
      assert_raises(Strata::CorruptError, bytes.inspect) { Entry.decode(bytes) }
    end
    assert_raises(Strata::CorruptError) { Entry.expires_at("nope") }
  end

  def test_unknown_flags_are_corrupt
    bytes = Entry.encode("x").b
    [0x80, 0x0A, 0x0E, 0x8E].each do |flags|
      bytes.setbyte(1, flags)
      assert_raises(Strata::CorruptError, flags.to_s) { Entry.decode(bytes) }
    end
  end

  def test_lengths_that_run_past_the_end_are_corrupt
    long_version = Entry.encode("", version: "version").b
    long_version.setbyte(10, 200)
    assert_raises(Strata::CorruptError) { Entry.decode(long_version) }

    many_stamps = Entry.encode("", stamps: [[1, 1]]).b
    many_stamps.setbyte(12, 2)
    assert_raises(Strata::CorruptError) { Entry.decode(many_stamps) }
  end

  def test_a_truncated_header_is_corrupt_and_a_truncated_payload_is_shorter
    bytes = Entry.encode("payload", expires_at: 5, version: "version", stamps: [[3, 4], [5, 6]])
    header = bytes.bytesize - "payload".bytesize
    bytes.bytesize.times do |size|
      truncated = bytes.byteslice(0, size)
      if size < header
        assert_raises(Strata::CorruptError, size.to_s) { Entry.decode(truncated) }
      else
        assert_equal "payload".byteslice(0, size - header), Entry.decode(truncated).payload
      end
    end
  end

  def test_random_bytes_after_the_marker_decode_or_raise_corrupt
    random = Random.new(7)
    outcomes = Array.new(2_000) do
      Entry.decode("\xE1".b + random.bytes(random.rand(0..40)))
      :decoded
    rescue Strata::CorruptError
      :corrupt
    end

    assert_equal 2_000, outcomes.count { |outcome| outcome == :decoded || outcome == :corrupt }
  end

  def test_stamps_set_the_stamped_flag_and_untagged_entries_are_unchanged
    plain = Entry.encode("x", version: "v")
    stamped = Entry.encode("x", version: "v", stamps: [[1, 2]])

    refute Entry.stamped?(plain)
    assert Entry.stamped?(stamped)
    assert_equal 0, plain.getbyte(1) & Entry::STAMPED
    assert_equal [[1, 2]], Entry.stamps(stamped)
    assert_empty Entry.stamps(plain)
    refute Entry.stamped?("12")
  end

  # A soft-stale copy: the stored bytes with a marker bit set, in a copy; it decodes and gives
  # its stamps as they were, and is neither an entry nor stamped for the tiers (never copied up,
  # never checked again); unmarked gives the stored bytes back.
  def test_a_soft_stale_copy_is_a_marked_copy_no_tier_takes
    [Entry.encode("x", stamps: [[1, 2]]), Entry.put_back!(Entry.encode("x", expires_at: 5, stamps: [[1, 2]]))].each do |stored|
      copy = Entry.soft_stale(stored)

      assert Entry.soft_stale?(copy)
      refute Entry.soft_stale?(stored), "the stored bytes are left as they were"
      refute Entry.entry?(copy)
      refute Entry.stamped?(copy)
      assert_equal [1, 2], Entry.stamp_words(copy)
      assert_equal "x", Entry.decode(copy).payload
      assert_nil Entry.plain_string(copy)
      assert_equal stored, Entry.unmarked(copy)
      assert_same stored, Entry.unmarked(stored)
    end
  end

  # Only the marker tells a put-back entry (race_condition_ttl) apart: it decodes as the entry
  # it was, in a String or a Split, and is never a bare string read without decoding.
  def test_a_put_back_entry_differs_by_its_marker_only
    bytes = Entry.encode("x", expires_at: 123_456, version: "v", stamps: [[1, 2]])
    marked = Entry.put_back!(bytes.dup)

    assert Entry.put_back?(marked)
    refute Entry.put_back?(bytes)
    assert_equal bytes.byteslice(1..), marked.byteslice(1..)
    assert Entry.entry?(marked)
    assert Entry.stamped?(marked)
    assert_equal [[1, 2]], Entry.stamps(marked)
    assert_equal 123_456, Entry.expires_at(marked)
    decoded = Entry.decode(marked)
    assert_equal ["x", 123_456, "v"], [decoded.payload, decoded.expires_at, decoded.version]
    assert_nil Entry.plain_string(Entry.put_back!(Entry.encode("x")))

    split = Entry.put_back!(Entry::Split.new(Entry.encode(""), "y" * 10))
    assert Entry.put_back?(split.head)
    refute Entry.put_back?("12")
    assert_equal "12", Entry.put_back!(+"12"), "a counter is left as it is"
  end

  def test_a_stamp_count_that_disagrees_with_the_flag_is_corrupt
    flagged = Entry.encode("x").b
    flagged.setbyte(1, flagged.getbyte(1) | Entry::STAMPED)
    assert_raises(Strata::CorruptError) { Entry.decode(flagged) }

    unflagged = Entry.encode("x", stamps: [[1, 1]]).b
    unflagged.setbyte(1, unflagged.getbyte(1) & ~Entry::STAMPED)
    assert_raises(Strata::CorruptError) { Entry.decode(unflagged) }
  end
end
