# frozen_string_literal: true

require "test_helper"
require "support/hooked_key"

module Strata
  module Tiers
    # get_multi runs the caller's code between lookups: putting a found key into the result Hash
    # asks a String subclass's eql? when an equal key is there already. A table that code closes
    # (itself, or by letting another thread run) must raise the tier's "closed" error on the next
    # key, not be read through a dangling handle.
    class SharedMemoryGetMultiTest < Minitest::Test
      SIZE = 4 << 20

      HookedKey = Strata::TestSupport::HookedKey

      def setup
        @dir = Strata::TestSupport.private_tmpdir
        @table = SharedMemory.new(path: File.join(@dir, "t.l1"), size: SIZE)
        @table.set("a", "1")
        @table.set("b", "2" * 25_000) # a large value takes the memo's path too
      end

      def teardown
        @table.close
        FileUtils.remove_entry(@dir)
      end

      def test_a_key_whose_eql_closes_the_table
        error = assert_raises(Strata::Error) { @table.get_multi(equal_keys("a") { @table.close } + ["b"]) }
        assert_equal "closed", error.message
      end

      def test_another_thread_closing_the_table_between_keys
        keys = equal_keys("a") { Thread.new { @table.close }.join }
        error = assert_raises(Strata::Error) { @table.get_multi(keys + ["b"]) }
        assert_equal "closed", error.message
      end

      def test_a_key_whose_eql_empties_the_key_list
        keys = equal_keys("a") { keys.clear } + ["b"]
        assert_equal({"a" => "1"}, @table.get_multi(keys))
      end

      def test_subclass_keys_are_found_and_returned_as_given
        key = HookedKey.new("b")
        found = @table.get_multi([key, "a", "missing"])
        assert_equal({"b" => "2" * 25_000, "a" => "1"}, found)
        assert_same HookedKey, found.keys.first.class
      end

      private

      # Two equal HookedKeys: storing the second in the result asks eql? of one of them.
      def equal_keys(content, &hook)
        Array.new(2) { HookedKey.new(content).tap { |key| key.on_eql = hook } }
      end
    end
  end
end
