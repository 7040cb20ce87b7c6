# frozen_string_literal: true

require "test_helper"
require "logger"
require "stringio"
require "support/child_processes"
require "support/waiting"

module Strata
  module Tiers
    # Behaviour of the L1 tier through its Ruby API. Robustness (fuzz, crash loop, SIGSTOP,
    # corrupt files) lives in the other shared_memory_*_test.rb files.
    class SharedMemoryTest < Minitest::Test
      include Strata::TestSupport::TrackedChildren
      include Strata::Waiting

      SIZE = 4 << 20
      DEADLINE = 10.0 # seconds for a child to report or exit; a hang fails the test instead of stalling it
      EXPIRY_WAIT = 2 # seconds a short TTL gets to run out
      # A TTL read back at once and then waited out: long enough that a loaded machine reads it
      # before it ends.
      SHORT_TTL = 0.5

      def setup
        @dir = Strata::TestSupport.private_tmpdir
        @tables = []
        @pids = []
      end

      def teardown
        kill_tracked_children
        @tables.each(&:close)
        FileUtils.remove_entry(@dir)
      end

      def table(name = "t.l1", size: SIZE, **opts)
        SharedMemory.new(path: File.join(@dir, name), size: size, **opts).tap { |t| @tables << t }
      end

      # A child's exit status, reaped within DEADLINE; nil if it is still running (teardown kills it).
      def run_child(&)
        reap_child(fork_tracked(&))
      end

      # Waits at most DEADLINE for io to become readable, so a child that hangs fails the test.
      def wait_readable(io, what)
        flunk "#{what}: nothing within #{DEADLINE}s" unless IO.select([io], nil, nil, DEADLINE)
      end

      def test_tier_contract_and_capabilities
        t = table
        assert_kind_of Strata::Tier, t
        assert_equal %i[cas counters host listing sweeping polled_copies stamp_check],
          t.capabilities.select { |_, yes| yes }.keys
        assert_equal Strata::Tier::CAPABILITIES.keys, t.capabilities.keys
        %i[keys cleanup add_polled polled_until= check_stamps].each { |method| assert_respond_to t, method }
      end

      def test_set_get_overwrite_delete
        t = table
        assert_nil t.get("k")
        assert t.set("k", "one")
        assert_equal "one", t.get("k")
        assert t.set("k", "two, longer")
        assert_equal "two, longer", t.get("k")
        assert t.delete("k")
        refute t.delete("k")
        assert_nil t.get("k")
      end

      def test_get_returns_a_new_binary_string
        t = table
        t.set("k", "héllo")
        value = t.get("k")
        assert_equal Encoding::BINARY, value.encoding
        assert_equal "héllo".b, value
        refute value.frozen?
        refute_same value, t.get("k")
      end

      def test_binary_utf8_and_space_keys
        t = table
        keys = ["with space", "ünïcødé ключ", "\x00\xff\x01bin".b, "a" * 250, "x"]
        keys.each_with_index { |k, i| assert t.set(k, "v#{i}\x00end".b) }
        keys.each_with_index { |k, i| assert_equal "v#{i}\x00end".b, t.get(k) }
        assert_nil t.get("\x00\xff\x01bi".b)
        assert_equal keys.map(&:b).sort, t.keys.map(&:b).sort
      end

      def test_empty_value
        t = table
        assert t.set("k", "")
        assert_equal "", t.get("k")
      end

      def test_bad_keys
        t = table
        assert_raises(ArgumentError, "key is nil") { t.get(nil) }
        error = assert_raises(ArgumentError) { t.set("", "v") }
        assert_match(/empty/, error.message)
        error = assert_raises(ArgumentError) { t.get("a" * 251) }
        assert_match(/251/, error.message)
        assert_raises(TypeError) { t.get(:sym) }
        assert_raises(TypeError) { t.set(1, "v") }
        assert_raises(TypeError) { t.delete(["k"]) }
      end

      def test_bad_values_and_options
        t = table
        assert_raises(TypeError) { t.set("k", nil) }
        assert_raises(TypeError) { t.set("k", 12) }
        assert_raises(ArgumentError) { t.set("k", "v", ttl: -1) }
        assert_raises(TypeError) { t.set("k", "v", ttl: "10") }
        assert_raises(ArgumentError) { t.set("k", "v", tll: 10) }
        assert_nil t.get("k")
      end

      # set, add and cas read their one keyword from the caller's Hash without changing it, and
      # refuse any other keyword, a Hash given positionally and a wrong count, as Ruby does.
      def test_keyword_arguments_of_writes
        t = table
        options = {ttl: 60}
        assert t.set("k", "v", **options)
        assert t.add("a", "v", ttl: nil)
        assert t.cas("k", "w", t.get_with_cas("k").last, **options)
        assert_equal({ttl: 60}, options)
        assert_equal "w", t.get("k")
        assert_match(/unknown keyword: :tll/, assert_raises(ArgumentError) { t.set("k", "v", ttl: 1, tll: 2) }.message)
        assert_match(/unknown keyword/, assert_raises(ArgumentError) { t.add("b", "v", "ttl" => 1) }.message)
        assert_match(/given 3, expected 2/, assert_raises(ArgumentError) { t.set("k", "v", {ttl: 1}) }.message)
        assert_match(/given 2, expected 3/, assert_raises(ArgumentError) { t.cas("k", "v") }.message)
        assert_equal "w", t.get("k")
        assert_nil t.get("b")
      end

      # A Strata::Entry::Split is stored as head followed by payload, by set, add and cas alike,
      # and counts whole against max_value_size.
      def test_a_split_value_is_stored_joined
        t = table
        split = Strata::Entry::Split.new("head:".b, "payload " * 1000)
        assert t.set("k", split)
        assert_equal "head:#{"payload " * 1000}", t.get("k")
        assert t.add("added", Strata::Entry::Split.new("h".b, "".b))
        assert_equal "h", t.get("added")
        _, token = t.get_with_cas("k")
        assert t.cas("k", Strata::Entry::Split.new("".b, "swapped"), token)
        assert_equal "swapped", t.get("k")

        limit = t.max_value_size
        half = limit / 2
        assert_raises(Strata::ValueTooLargeError) { t.set("k", Strata::Entry::Split.new("x" * half, "y" * (limit - half))) }
        assert_equal "swapped", t.get("k")
        assert t.set("k", Strata::Entry::Split.new("x" * half, "y" * (limit - half - 1)))
        assert_equal limit - 1, t.get("k").bytesize
      end

      def test_a_split_of_something_else_than_strings_is_refused
        t = table
        assert_raises(TypeError) { t.set("k", Strata::Entry::Split.new("head", nil)) }
        assert_raises(TypeError) { t.set("k", Strata::Entry::Split.new(1, "payload")) }
        assert_raises(TypeError) { t.set("k", Struct.new(:head, :payload).new("a", "b")) }
        assert_nil t.get("k")
      end

      def test_constructor_validation_names_the_option
        path = File.join(@dir, "bad.l1")
        {
          {size: 1000} => /size/,
          {size: "big"} => /size/,
          {size: SIZE, shards: 3} => /shards/,
          {size: SIZE, segment_size: 5000} => /segment_size/,
          {size: SIZE, slots: 0} => /slots/,
          {size: SIZE, lock_timeout: -1} => /lock_timeout/,
          {size: 1 << 20, shards: 256, segment_size: 4 << 20} => /size|shards|segment/
        }.each do |opts, message|
          error = assert_raises(ArgumentError, opts.inspect) { SharedMemory.new(path: path, **opts) }
          assert_match message, error.message
        end
      end

      # 0 used to mean "try the lock once": every write that met another writer fenced its key,
      # and under contention most keys went missing. A wait that short is refused.
      def test_lock_timeout_below_the_minimum_is_refused
        path = File.join(@dir, "timeout.l1")
        [0, 0.0, 0.001, 0.0099].each do |timeout|
          error = assert_raises(ArgumentError, timeout.inspect) do
            SharedMemory.new(path: path, size: SIZE, lock_timeout: timeout)
          end
          assert_match(/lock_timeout must be between 0.01 and 60 seconds/, error.message)
        end
        refute File.exist?(path)
        t = SharedMemory.new(path: path, size: SIZE, lock_timeout: SharedMemory::MIN_LOCK_TIMEOUT)
        assert t.set("k", "v")
        assert_equal "v", t.get("k")
      ensure
        t&.close
      end

      def test_ttl_expiry
        t = table
        assert t.set("short", "v", ttl: SHORT_TTL)
        assert t.set("long", "v", ttl: 60)
        assert t.set("never", "v", ttl: 0)
        assert t.set("nil", "v", ttl: nil)
        assert_equal "v", t.get("short")
        assert wait_until(EXPIRY_WAIT) { t.get("short").nil? }
        assert_equal "v", t.get("long")
        assert_equal "v", t.get("never")
        assert_equal "v", t.get("nil")
        refute_includes t.keys, "short"
      end

      def test_add
        t = table
        assert t.add("k", "first")
        refute t.add("k", "second")
        assert_equal "first", t.get("k")
        t.set("brief", "old", ttl: 0.02)
        assert wait_until(EXPIRY_WAIT) { t.get("brief").nil? }
        assert t.add("brief", "new")
        assert_equal "new", t.get("brief")
      end

      def test_cas
        t = table
        assert_nil t.get_with_cas("k")
        t.set("k", "v1")
        value, token = t.get_with_cas("k")
        assert_equal "v1", value
        assert_kind_of Integer, token
        assert t.cas("k", "v2", token)
        refute t.cas("k", "v3", token), "token is stale after a write"
        assert_equal "v2", t.get("k")
        _, token = t.get_with_cas("k")
        t.delete("k")
        refute t.cas("k", "v4", token), "no cas on a deleted key"
        assert_nil t.get("k")
      end

      def test_replace_stores_only_over_the_value_it_names
        t = table
        t.set("k", "stale")
        refute t.replace("k", "other", "new")
        assert t.replace("k", "stale", "new")
        refute t.replace("k", "stale", "newer"), "a write since wins"
        t.delete("k")
        refute t.replace("k", "new", "resurrected"), "a delete since wins"
        assert_nil t.get("k")
      end

      def test_get_multi
        t = table
        t.set("a", "1")
        t.set("c", "3")
        assert_equal({"a" => "1", "c" => "3"}, t.get_multi(%w[a b c]))
        assert_equal({}, t.get_multi([]))
      end

      def test_counters
        t = table
        assert_nil t.incr("n")
        assert_equal 10, t.incr("n", initial: 10)
        assert_equal 11, t.incr("n")
        assert_equal 16, t.incr("n", 5)
        assert_equal "16", t.get("n")
        assert_equal 6, t.decr("n", 10)
        assert_equal 0, t.decr("n", 100), "decr floors at 0"
        t.set("max", (2**64 - 1).to_s)
        assert_equal 0, t.incr("max"), "incr wraps at 2**64"
        assert_equal 7, t.decr("fresh", initial: 7)
        assert_nil t.decr("absent")
      end

      def test_counter_on_text_raises_naming_the_key
        t = table
        t.set("word", "abc")
        error = assert_raises(ArgumentError) { t.incr("word") }
        assert_match(/word/, error.message)
        assert_equal "abc", t.get("word")
        assert_raises(ArgumentError) { t.incr("n", -1) }
      end

      def test_counter_initial_takes_ttl_and_keeps_it
        t = table
        assert_equal 1, t.incr("c", initial: 1, ttl: SHORT_TTL)
        assert_equal 2, t.incr("c")
        assert wait_until(EXPIRY_WAIT) { t.get("c").nil? }
      end

      def test_counters_are_atomic_across_processes
        t = table
        t.set("hits", "0")
        pids = 2.times.map do
          fork_tracked do
            child = SharedMemory.new(path: t.path, size: SIZE)
            500.times { child.incr("hits") }
          end
        end
        pids.each { |pid| assert reap_child(pid)&.success? }
        assert_equal "1000", t.get("hits")
      end

      def test_value_too_large_leaves_old_value
        t = table
        t.set("k", "old")
        limit = t.max_value_size
        assert_raises(Strata::ValueTooLargeError) { t.set("k", "x" * limit) }
        assert_raises(Strata::ValueTooLargeError) { t.add("new", "x" * limit) }
        assert_equal "old", t.get("k")
        assert_nil t.get("new")
        assert t.set("k", "y" * (limit - 1)), "key + value of exactly max_value_size fits"
        assert_equal limit - 1, t.get("k").bytesize
        assert_equal 2, t.stats[:too_large]
      end

      def test_full_table_evicts_and_keeps_recent_writes
        t = table(size: 1 << 20)
        value = "v" * 200
        written = 20_000
        written.times { |i| assert t.set("key-#{i}", value) }
        recent = (written - 300...written).count { |i| t.get("key-#{i}") == value }
        assert_operator recent, :>=, 285
        stats = t.stats
        assert_operator stats[:evictions], :>, 0
        assert_operator stats[:entries], :>, 1000, "eviction is per segment, never a wipe"
      end

      def test_read_entries_survive_eviction
        t = table(size: 1 << 20)
        hot = (0...20).map { |i| "hot-#{i}" }
        hot.each { |k| t.set(k, "hot") }
        10_000.times do |i|
          t.set("cold-#{i}", "c" * 150)
          hot.each { |k| t.get(k) } if (i % 50).zero?
        end
        assert_equal hot.size, hot.count { |k| t.get(k) == "hot" }
      end

      def test_keys_cleanup_clear
        t = table
        10.times { |i| t.set("k#{i}", "v") }
        t.set("brief", "v", ttl: SHORT_TTL)
        assert_equal 11, t.keys.size
        assert wait_until(EXPIRY_WAIT) { t.get("brief").nil? }
        assert_equal((0...10).map { |i| "k#{i}" }.sort, t.keys.sort)
        assert_equal 1, t.cleanup
        assert_equal 0, t.cleanup
        assert t.clear
        assert_empty t.keys
        assert_nil t.get("k1")
        assert t.set("k1", "after")
        assert_equal "after", t.get("k1")
      end

      def test_stats
        t = table
        t.set("a", "1")
        t.get("a")
        t.get("b")
        t.delete("a")
        stats = t.stats
        assert_equal 1, stats[:sets]
        assert_equal 1, stats[:hits]
        assert_equal 1, stats[:misses]
        assert_equal 1, stats[:deletes]
        assert_equal 0, stats[:entries]
        %i[evictions expired lock_timeouts too_large owner_died_recoveries torn_reads].each do |key|
          assert_equal 0, stats[key], key
        end
        assert_equal SIZE, stats[:size]
        assert_equal t.max_value_size, stats[:max_value_size]
        %i[shards segment_size slots data_bytes].each { |key| assert_operator stats[key], :>, 0 }
        assert_operator stats[:data_bytes], :<, SIZE
      end

      def test_geometry_options
        t = table(shards: 4, segment_size: 128 << 10, slots: 10_000)
        stats = t.stats
        assert_equal 4, stats[:shards]
        assert_equal 128 << 10, stats[:segment_size]
        assert_operator stats[:slots], :>=, 10_000
        assert_equal (128 << 10) - 40, t.max_value_size
      end

      def test_stats_in_forked_child_start_at_zero
        t = table
        t.set("k", "v")
        reader, writer = IO.pipe
        pid = fork_tracked do
          reader.close
          t.get("k")
          writer.write(Marshal.dump(t.stats.slice(:sets, :hits)))
          writer.close
        end
        writer.close
        wait_readable(reader, "the child's stats")
        child = Marshal.load(reader.read) # rubocop:disable Security/MarshalLoad
        reap_child(pid)
        assert_equal({sets: 0, hits: 1}, child)
        assert_equal 1, t.stats[:sets]
      end

      def test_shared_between_handles_and_processes
        a = table
        b = table
        a.set("k", "from a")
        assert_equal "from a", b.get("k")
        run_child { SharedMemory.new(path: a.path, size: SIZE).set("child", "hello") }
        assert_equal "hello", a.get("child")
      end

      def test_close
        t = table
        t.set("k", "v")
        t.close
        t.close
        assert t.closed?
        error = assert_raises(Strata::Error) { t.get("k") }
        assert_equal "closed", error.message
        assert_raises(Strata::Error) { t.set("k", "v") }
        assert_raises(Strata::Error) { t.stats }
        assert_equal "v", table.get("k"), "closing one handle leaves the file"
      end

      # Argument conversion runs the caller's code; a table it closes must give an error, not
      # a dangling handle.
      def test_closed_while_converting_arguments
        t = table
        t.set("k", "v")
        keys = Object.new
        keys.define_singleton_method(:to_ary) do
          t.close
          ["k"]
        end
        error = assert_raises(Strata::Error) { t.get_multi(keys) }
        assert_equal "closed", error.message
      end

      def test_path_size_and_file_mode
        t = table("sub/dir/t.l1")
        assert_equal File.join(@dir, "sub/dir/t.l1"), t.path
        assert_equal SIZE, t.size
        assert_equal 0o600, File.stat(t.path).mode & 0o777
        assert_equal 0o700, File.stat(File.join(@dir, "sub/dir")).mode & 0o777
        assert_equal SIZE, File.size(t.path)
      end

      def test_default_path
        path = SharedMemory.default_path("shop")
        assert_match %r{/strata-#{Process.uid}/shop\.l1\z}, path
        assert_match(/app\.l1\z/, SharedMemory.default_path)
      end

      # An empty or relative $XDG_RUNTIME_DIR is ignored (XDG spec), not joined into "/strata-<uid>".
      def test_default_path_ignores_an_unusable_runtime_dir
        previous = ENV["XDG_RUNTIME_DIR"]
        ENV["XDG_RUNTIME_DIR"] = @dir
        assert_equal File.join(@dir, "strata-#{Process.uid}", "app.l1"), SharedMemory.default_path
        ["", "relative/run"].each do |unusable|
          ENV["XDG_RUNTIME_DIR"] = unusable
          assert_equal "/dev/shm/strata-#{Process.uid}/app.l1", SharedMemory.default_path, unusable.inspect
        end
      ensure
        ENV["XDG_RUNTIME_DIR"] = previous
      end

      def test_unsafe_file_is_refused
        path = File.join(@dir, "unsafe.l1")
        File.write(path, "")
        File.chmod(0o666, path)
        assert_raises(Strata::UnsafeFileError) { SharedMemory.new(path: path, size: SIZE) }
        assert_equal 0, File.size(path), "refused, not rebuilt"
        File.symlink(path, File.join(@dir, "link.l1"))
        File.chmod(0o600, path)
        assert_raises(Strata::UnsafeFileError) { SharedMemory.new(path: File.join(@dir, "link.l1"), size: SIZE) }
      end

      def test_corrupt_file_is_rebuilt_with_a_warning
        path = table("c.l1").tap { |t| t.set("k", "v") }.path
        File.open(path, "r+b") { |f| f.pwrite("garbage!", 8) } # after the magic number: still ours
        log = StringIO.new
        t = table("c.l1", logger: Logger.new(log))
        assert_match(/rebuilt .*c\.l1: foreign layout version/, log.string)
        assert_nil t.get("k")
        assert t.set("k", "new")
        assert_equal "new", t.get("k")
      end

      def test_geometry_change_rebuilds
        table("g.l1").set("k", "v")
        log = StringIO.new
        t = table("g.l1", size: 2 * SIZE, logger: Logger.new(log))
        assert_match(/geometry/, log.string)
        assert_equal 2 * SIZE, t.size
        assert_nil t.get("k")
      end

      def test_truncated_file_is_rebuilt_and_kernel_warn_without_logger
        path = table("tr.l1").path
        File.truncate(path, 10_000)
        _, err = capture_io { table("tr.l1") }
        assert_match(/rebuilt/, err)
        assert_equal SIZE, File.size(path)
      end

      def test_lock_hooks_and_timeouts
        t = table(lock_timeout: 0.01)
        key = "locked-key"
        shard = t._shard_for(key)
        assert_includes 0...t.stats[:shards], shard
        other = SharedMemory.new(path: t.path, size: SIZE, lock_timeout: 0.01)
        @tables << other
        assert other._hold_shard_lock(shard)
        refute t.set(key, "v"), "the lock is held by this thread through another handle"
        refute t.add(key, "v")
        refute t.delete(key), "a delete that cannot take the lock makes the key a miss: nothing to raise"
        assert_equal 3, t.stats[:lock_timeouts]
        assert_nil t.get(key), "readers never wait"
        assert other._release_shard_lock(shard)
        assert t.set(key, "v")
        assert_equal "v", t.get(key)
      end

      def test_contended_write_waits_without_the_gvl
        t = table(lock_timeout: 5)
        key = "contended"
        shard = t._shard_for(key)
        reader, writer = IO.pipe
        release_r, release_w = IO.pipe
        pid = fork_tracked do
          reader.close
          release_w.close
          holder = SharedMemory.new(path: t.path, size: SIZE)
          holder._hold_shard_lock(shard)
          writer.write("held")
          writer.close
          IO.select([release_r], nil, nil, DEADLINE) # until the parent closes its end, or it is gone
          holder._release_shard_lock(shard)
        end
        writer.close
        release_r.close
        wait_readable(reader, "the lock holder")
        assert_equal "held", reader.read(4)
        ticks = 0
        waiter = Thread.current
        # The holder lets go only once this thread sees the writer blocked in C without the GVL
        # (Thread#status "sleep"). A write that kept the GVL would starve this thread and time out.
        ticker = Thread.new do
          loop do
            ticks += 1
            release_w.close if waiter.status == "sleep" && !release_w.closed?
            sleep 0.001
          end
        end
        # A Split: the writer copies its key, head and payload before it lets the GVL go.
        assert t.set(key, Strata::Entry::Split.new("h" * 20, "v" * 1000)), "waits for the holder, then writes"
        ticker.kill
        ticker.join
        release_w.close unless release_w.closed?
        reap_child(pid)
        assert_operator ticks, :>, 0, "other threads run while the writer waits"
        assert_equal "h" * 20 + "v" * 1000, t.get(key)
        assert_equal 0, t.stats[:lock_timeouts]
      end

      def test_dead_lock_holder_is_recovered
        t = table
        t.set("k", "v")
        shard = t._shard_for("k")
        run_child { SharedMemory.new(path: t.path, size: SIZE)._hold_shard_lock(shard) }
        assert t.set("k", "after")
        assert_equal "after", t.get("k")
        assert_equal 1, t.stats[:owner_died_recoveries]
      end
    end
  end
end
