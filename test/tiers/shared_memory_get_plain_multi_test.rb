# frozen_string_literal: true

require "test_helper"
require "support/hooked_key"
require "strata/dependencies"
require "strata/entry"

module Strata
  module Tiers
    # SharedMemory#get_plain_multi: the read a page of cached Strings takes (Stack#get_multi_plain).
    # An entry holding a bare String comes back as its value, its stamps checked in the same call;
    # any other entry as its bytes; a stamped one not current, and a key not held, in neither.
    class SharedMemoryGetPlainMultiTest < Minitest::Test
      HookedKey = Strata::TestSupport::HookedKey

      def setup
        @dir = Strata::TestSupport.private_tmpdir
        @table = SharedMemory.new(path: File.join(@dir, "t.l1"), size: 4 << 20)
        @dependencies = Dependencies.new([@table], %i[l1])
        @ids = %w[bugs/1 projects/7].map { |tag| Dependencies.tag_id(tag) }
      end

      def teardown
        @table.close
        FileUtils.remove_entry(@dir)
      end

      def stamps
        @ids.zip(@dependencies.versions(@ids))
      end

      def test_bare_strings_come_back_as_their_values_in_their_encodings
        @table.set("utf8", Entry.encode("héllo".b, flags: Entry::UTF8))
        @table.set("binary", Entry.encode("\xff\x00".b, flags: Entry::BINARY))
        @table.set("ascii", Entry.encode("plain", flags: Entry::ASCII))
        @table.set("large", Entry.encode("x" * 25_000, flags: Entry::UTF8)) # the memo's path

        plain, held = @table.get_plain_multi(%w[utf8 binary ascii large missing])

        assert_equal ["héllo", "\xff\x00".b, "plain", "x" * 25_000, nil], plain
        assert_equal [Encoding::UTF_8, Encoding::BINARY, Encoding::US_ASCII, Encoding::UTF_8], plain.compact.map(&:encoding)
        assert_empty held
        refute plain[3].frozen?, "the caller's to change, as a get's bytes are"
      end

      def test_a_stamped_string_is_its_value_while_its_stamps_are_current_and_nothing_after
        @table.set("page/1", Entry.encode("[1]", flags: Entry::UTF8, stamps: stamps))

        assert_equal [["[1]"], {}], @table.get_plain_multi(["page/1"])

        @dependencies.bump([@ids.last])
        assert_equal [[nil], {}], @table.get_plain_multi(["page/1"])
      end

      def test_a_stamped_string_whose_versions_this_table_lacks_is_left_to_the_stack
        other = SharedMemory.new(path: File.join(@dir, "other.l1"), size: 1 << 20)
        foreign = Dependencies.new([other], %i[l1])
        @table.set("page/1", Entry.encode("[1]", flags: Entry::UTF8, stamps: @ids.zip(foreign.versions(@ids))))

        assert_equal [[nil], {}], @table.get_plain_multi(["page/1"])
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

        assert_equal [[nil] * entries.size, entries], @table.get_plain_multi(entries.keys)
      end

      def test_a_stale_stamped_entry_of_any_kind_is_in_neither
        @table.set("stamped_marshaled", Entry.encode(Marshal.dump([1]), stamps: stamps))
        @dependencies.bump([@ids.first])

        assert_equal [[nil], {}], @table.get_plain_multi(["stamped_marshaled"])
      end

      def test_malformed_bytes_are_not_taken_for_a_string
        header = Entry.encode("", flags: Entry::UTF8, stamps: stamps)
        short = header.byteslice(0, header.bytesize - 9) # the last stamp cut
        put_back = Entry.encode("p", flags: Entry::UTF8).dup.tap { |bytes| bytes.setbyte(0, Entry::PUT_BACK_MARKER) }
        @table.set("short", short)
        @table.set("put_back", put_back)

        plain, held = @table.get_plain_multi(%w[short put_back])
        assert_equal [nil, nil], plain
        assert_equal({"put_back" => put_back}, held) # the stack's decoder says what it is
      end

      def test_a_hit_counts_once_and_a_miss_as_no_hit
        @table.set("hit", Entry.encode("h", flags: Entry::UTF8))
        before = @table.stats

        @table.get_plain_multi(%w[hit missing])

        after = @table.stats
        assert_equal 1, after.fetch(:hits) - before.fetch(:hits)
      end

      # Storing a held entry may run a String subclass's eql?, which may shorten keys: the values
      # stay as long as keys was, the keys gone are not read.
      def test_keys_shortened_while_it_runs
        @table.set("held", Entry.encode(Marshal.dump(1)))
        @table.set("last", Entry.encode("l", flags: Entry::UTF8))
        keys = [HookedKey.new("held"), HookedKey.new("held"), "last"]
        shorten = -> { keys.pop if keys.size == 3 }
        keys.first(2).each { |key| key.on_eql = shorten }

        plain, held = @table.get_plain_multi(keys)
        assert_equal [nil, nil, nil], plain
        assert_equal ["held"], held.keys
      end

      def test_keys_must_be_strings
        assert_raises(TypeError) { @table.get_plain_multi([:symbol]) }
      end
    end
  end
end
