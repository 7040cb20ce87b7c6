# frozen_string_literal: true

require "test_helper"
require "strata/dependencies"
require "strata/entry"
require "support/child_processes"

module Strata
  module Tiers
    # SharedMemory#check_stamps: an entry's dependency stamps against the tag versions the same
    # table holds, under the keys and in the bytes Strata::Dependencies writes them
    # (ext/strata/stamp_check.h).
    class SharedMemoryCheckStampsTest < Minitest::Test
      include Strata::TestSupport::ChildProcesses

      BUMPS = 200
      DEADLINE = 30

      def setup
        @dir = Strata::TestSupport.private_tmpdir
        @table = SharedMemory.new(path: File.join(@dir, "t.l1"), size: 1 << 20)
        @dependencies = Dependencies.new(Strata::TierList.new({l1: @table}))
        @ids = %w[bugs/42 projects/7 users/1 teams/3].map { |tag| Dependencies.tag_id(tag) }
      end

      def teardown
        @table.close
        FileUtils.remove_entry(@dir)
      end

      def entry(ids, versions)
        Entry.encode("value", version: "v1", stamps: ids.zip(versions))
      end

      def test_current_with_one_stamp_and_with_many
        versions = @dependencies.versions(@ids)

        assert_equal true, @table.check_stamps(entry(@ids.first(1), versions.first(1)))
        assert_equal true, @table.check_stamps(entry(@ids, versions))
      end

      # An entry put back for race_condition_ttl (Entry.put_back!) is checked as any other.
      def test_a_put_back_entry_is_checked_as_any_other
        versions = @dependencies.versions(@ids)

        assert_equal true, @table.check_stamps(Entry.put_back!(entry(@ids, versions)))
        @dependencies.bump([@ids[0]])
        assert_equal false, @table.check_stamps(Entry.put_back!(entry(@ids, versions)))
      end

      # The table holds versions as Dependencies writes them: a bump there is seen at once.
      def test_one_stale_stamp_makes_it_false
        versions = @dependencies.versions(@ids)
        @dependencies.bump([@ids[2]])

        assert_equal false, @table.check_stamps(entry(@ids, versions))
        assert_equal true, @table.check_stamps(entry(@ids, @dependencies.versions(@ids)))
      end

      def test_a_version_the_table_does_not_hold_is_unknown
        versions = @dependencies.versions(@ids)
        @table.delete(@dependencies.version_key(@ids[1]))

        assert_nil @table.check_stamps(entry(@ids, versions))
        versions[3] += 1 # but a stale one beside it still settles it

        assert_equal false, @table.check_stamps(entry(@ids, versions))
      end

      def test_malformed_version_bytes_are_unknown
        versions = @dependencies.versions(@ids)
        key = @dependencies.version_key(@ids.last)
        good = @table.get(key)
        [good + "\x00".b, good.byteslice(0, 7), "".b].each do |bytes|
          @table.set(key, bytes)

          assert_nil @table.check_stamps(entry(@ids, versions)), "#{bytes.bytesize} bytes"
        end
      end

      def test_a_malformed_or_unstamped_entry_is_unknown
        versions = @dependencies.versions(@ids)
        bytes = entry(@ids, versions)

        assert_nil @table.check_stamps(Entry.encode("value"))
        assert_nil @table.check_stamps(bytes.byteslice(0, bytes.bytesize - "value".bytesize - 1))
        assert_nil @table.check_stamps("".b)
        assert_nil @table.check_stamps("not an entry at all")
        assert_equal true, @table.check_stamps(bytes.byteslice(0, bytes.bytesize - "value".bytesize))
      end

      # Another process sharing the table bumps one tag again and again, and tells each version
      # after its bump returned; this one checks, meanwhile, a stamp of the version before it,
      # superseded before the check began. None passes; the last version does once it is told.
      def test_a_bump_by_another_process_is_seen_by_every_check_that_starts_after_it
        versions = @dependencies.versions(@ids)
        reader, writer = IO.pipe
        pid = fork_child do
          reader.close
          table = SharedMemory.new(path: @table.path, size: 1 << 20)
          dependencies = Dependencies.new(Strata::TierList.new({l1: table}))
          BUMPS.times do
            dependencies.bump([@ids.last])
            writer.puts(dependencies.versions([@ids.last]).first)
          end
          writer.close
          table.close
          true
        end
        writer.close
        previous = versions.last
        while (line = reader.gets)
          told = Integer(line)
          stale = versions.first(3) + [previous]

          refute @table.check_stamps(entry(@ids, stale)), "a superseded version passed"
          previous = told
        end

        assert_predicate reap(pid, DEADLINE), :success?
        assert_equal true, @table.check_stamps(entry(@ids, versions.first(3) + [previous]))
      ensure
        reader&.close
      end

      # get_current: get with the check in the same call (Tier#get_current, Stack#get_host).
      def test_get_current_gives_what_passed_the_check_and_false_for_the_rest
        versions = @dependencies.versions(@ids)
        @table.set("current", entry(@ids, versions))
        @table.set("plain", Entry.encode("value"))
        @table.set("counter", "42")
        stale = versions.dup
        stale[1] += 1
        @table.set("stale", entry(@ids, stale))

        assert_equal entry(@ids, versions), @table.get_current("current")
        assert_equal Entry.encode("value"), @table.get_current("plain")
        assert_equal "42", @table.get_current("counter")
        assert_nil @table.get_current("absent")
        assert_equal false, @table.get_current("stale")
        assert_equal entry(@ids, stale), @table.get("stale"), "left for the stack to drop"

        @table.delete(@dependencies.version_key(@ids[2]))

        assert_equal false, @table.get_current("current"), "a version this table does not hold"
        @table.set("malformed", entry(@ids, versions).byteslice(0, Entry::HEADER_BYTES + 8))

        assert_equal false, @table.get_current("malformed")
      end

      def test_get_current_by_default_leaves_every_stamped_entry_to_the_stack
        tier = Class.new do
          include Strata::Tier

          def initialize(held)
            @held = held
          end

          def get(key)
            @held[key]
          end
        end.new("stamped" => entry(@ids, @dependencies.versions(@ids)), "plain" => Entry.encode("value"))

        assert_equal false, tier.get_current("stamped")
        assert_equal Entry.encode("value"), tier.get_current("plain")
        assert_nil tier.get_current("absent")
      end

      def test_bad_arguments_and_a_closed_table
        assert_raises(TypeError) { @table.check_stamps(nil) }
        assert_raises(TypeError) { @table.check_stamps(42) }
        @table.close
        error = assert_raises(Strata::Error) { @table.check_stamps(Entry.encode("value")) }
        assert_equal "closed", error.message
        assert_raises(Strata::Error) { @table.get_current("key") }
      end
    end
  end
end
