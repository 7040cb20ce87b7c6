# frozen_string_literal: true

require "test_helper"
require "support/hooked_key"
require "strata/dependencies"
require "strata/entry"

module Strata
  module Tiers
    # SharedMemory#get_plain_named: the read a page of cached Strings takes (Stack#get_multi_plain).
    # Each name's key is the prefix then the name. An entry holding a bare String comes back as its
    # value, its stamps checked in the same call; any other entry as its bytes; a stamped one not
    # current, a key not held and a name it makes no key of, in the rest.
    class SharedMemoryGetPlainNamedTest < Minitest::Test
      HookedKey = Strata::TestSupport::HookedKey

      def setup
        @dir = Strata::TestSupport.private_tmpdir
        @table = SharedMemory.new(path: File.join(@dir, "t.l1"), size: 4 << 20)
        @dependencies = Dependencies.new(Strata::TierList.new({l1: @table}))
        @ids = %w[bugs/1 projects/7].map { |tag| Dependencies.tag_id(tag) }
      end

      def teardown
        @table.close
        FileUtils.remove_entry(@dir)
      end

      def stamps
        @ids.zip(@dependencies.versions(@ids))
      end

      # get_plain_named with no prefix and the store's key limit.
      def read(names, prefix = "", max = 250)
        @table.get_plain_named(names, prefix, max)
      end

      def test_bare_strings_come_back_as_their_values_in_their_encodings
        @table.set("utf8", Entry.encode("héllo".b, flags: Entry::UTF8))
        @table.set("binary", Entry.encode("\xff\x00".b, flags: Entry::BINARY))
        @table.set("ascii", Entry.encode("plain", flags: Entry::ASCII))
        @table.set("large", Entry.encode("x" * 25_000, flags: Entry::UTF8)) # the memo's path

        values, held, rest = read(%w[utf8 binary ascii large missing])

        assert_equal({"utf8" => "héllo", "binary" => "\xff\x00".b, "ascii" => "plain", "large" => "x" * 25_000}, values)
        assert_equal [Encoding::UTF_8, Encoding::BINARY, Encoding::US_ASCII, Encoding::UTF_8], values.values.map(&:encoding)
        assert_empty held
        assert_equal ["missing"], rest
        refute values["large"].frozen?, "the caller's to change, as a get's bytes are"
      end

      def test_a_stamped_string_is_its_value_while_its_stamps_are_current_and_nothing_after
        @table.set("page/1", Entry.encode("[1]", flags: Entry::UTF8, stamps: stamps))

        assert_equal [{"page/1" => "[1]"}, {}, []], read(["page/1"])

        @dependencies.bump([@ids.last])
        assert_equal [{}, {}, ["page/1"]], read(["page/1"])
      end

      def test_a_stamped_string_whose_versions_this_table_lacks_is_left_to_the_stack
        other = SharedMemory.new(path: File.join(@dir, "other.l1"), size: 1 << 20)
        foreign = Dependencies.new(Strata::TierList.new({l1: other}))
        @table.set("page/1", Entry.encode("[1]", flags: Entry::UTF8, stamps: @ids.zip(foreign.versions(@ids))))

        assert_equal [{}, {}, ["page/1"]], read(["page/1"])
      ensure
        other&.close
      end

      def test_other_entries_come_back_as_their_bytes
        entries = {
          "marshaled" => Entry.encode(Marshal.dump({"a" => 1})),
          "versioned" => Entry.encode("v", flags: Entry::UTF8, version: "v1"),
          "expiring" => Entry.encode("e", flags: Entry::UTF8, expires_at: (Time.now.to_i + 60) * 1000),
          "stamped_marshaled" => Entry.encode(Marshal.dump([1]), stamps: stamps),
          "counter" => "42"
        }
        entries.each { |key, bytes| @table.set(key, bytes) }

        assert_equal [{}, entries, []], read(entries.keys)
      end

      def test_a_stale_stamped_entry_of_any_kind_is_in_neither
        @table.set("stamped_marshaled", Entry.encode(Marshal.dump([1]), stamps: stamps))
        @dependencies.bump([@ids.first])

        assert_equal [{}, {}, ["stamped_marshaled"]], read(["stamped_marshaled"])
      end

      def test_malformed_bytes_are_not_taken_for_a_string
        header = Entry.encode("", flags: Entry::UTF8, stamps: stamps)
        short = header.byteslice(0, header.bytesize - 9) # the last stamp cut
        put_back = Entry.encode("p", flags: Entry::UTF8).dup.tap { |bytes| bytes.setbyte(0, Entry::PUT_BACK_MARKER) }
        @table.set("short", short)
        @table.set("put_back", put_back)

        values, held, rest = read(%w[short put_back])
        assert_empty values
        assert_equal({"put_back" => put_back}, held) # the stack's decoder says what it is
        assert_equal ["short"], rest # stamped, and its stamps not settled here
      end

      def test_a_hit_counts_once_and_a_miss_as_no_hit
        @table.set("hit", Entry.encode("h", flags: Entry::UTF8))
        before = @table.stats

        read(%w[hit missing])

        after = @table.stats
        assert_equal 1, after.fetch(:hits) - before.fetch(:hits)
      end

      # The keys are the prefix's bytes then the name's, whatever their encodings.
      def test_each_key_is_the_prefix_then_the_name
        @table.set("ns:page/1", Entry.encode("one", flags: Entry::UTF8))
        @table.set("ns:café", Entry.encode("two", flags: Entry::UTF8))
        @table.set("page/1", Entry.encode("bare", flags: Entry::UTF8))
        binary = "caf\xC3\xA9".b

        values, _held, rest = read(["page/1", "café", binary, "page/2"], "ns:")
        assert_equal({"page/1" => "one", "café" => "two", binary => "two"}, values)
        assert_equal ["page/2"], rest
        assert_equal [{"page/1" => "bare"}, {}, []], read(["page/1"])
      end

      # A name the call makes no key of is in the rest, untouched, for the caller's own way.
      def test_names_it_makes_no_key_of_are_left_to_the_caller
        name = "n" * 247
        @table.set("ns:#{name}", Entry.encode("fits", flags: Entry::UTF8))
        too_long = "#{name}x"
        subclass = HookedKey.new("page/1")
        @table.set("ns:page/1", Entry.encode("one", flags: Entry::UTF8))
        names = [name, too_long, "", :symbol, 42, nil, subclass, ["page/1"]]

        values, held, rest = read(names, "ns:")
        assert_equal({name => "fits"}, values)
        assert_empty held
        assert_equal names.drop(1), rest
        assert_same subclass, rest[5]

        assert_equal [{}, {}, ["page/1"]], read(["page/1"], "ns:", 3), "a prefix as long as the limit leaves no room"
        assert_equal [{}, {}, [name]], read([name], "ns:", 249)
      end

      # get_current_plain: the same answers for one key, as the hit path of fetch and read takes
      # them (Stack#get_host_plain).
      def test_get_current_plain_answers_a_value_bytes_false_or_nil
        @table.set("utf8", Entry.encode("héllo".b, flags: Entry::UTF8))
        @table.set("page/1", Entry.encode("[1]", flags: Entry::UTF8, stamps: stamps))
        marshaled = Entry.encode(Marshal.dump({"a" => 1}))
        @table.set("marshaled", marshaled)
        @table.set("counter", "42")

        value = @table.get_current_plain("utf8")
        assert_equal "héllo", value
        assert_equal Encoding::UTF_8, value.encoding
        assert_equal "[1]", @table.get_current_plain("page/1")
        assert_equal [marshaled], @table.get_current_plain("marshaled")
        assert_equal ["42"], @table.get_current_plain("counter")
        assert_nil @table.get_current_plain("missing")

        @dependencies.bump([@ids.first])
        assert_equal false, @table.get_current_plain("page/1")

        # (The table's own hits count the tag versions a stamp check reads too: unstamped keys here.)
        before = @table.stats.fetch(:hits)
        @table.get_current_plain("utf8")
        @table.get_current_plain("counter")
        @table.get_current_plain("missing")
        assert_equal before + 2, @table.stats.fetch(:hits), "what it returns counts as a hit, nil nothing"
        assert_raises(TypeError) { @table.get_current_plain(:page) }
      end

      def test_names_must_be_an_array_and_the_prefix_a_string
        assert_raises(TypeError) { @table.get_plain_named("page/1", "", 250) }
        assert_raises(TypeError) { @table.get_plain_named(["page/1"], nil, 250) }
      end
    end
  end
end
