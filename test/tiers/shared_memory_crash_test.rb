# frozen_string_literal: true

require "test_helper"
require "support/crash_loop"
require "support/child_processes"

# A short run of the crash loop (test/support/crash_loop.rb); `rake torture` runs the long one.
# Writers are killed with SIGKILL at random points; afterwards every read must be a miss or a valid
# value, writes must work again, and no wait may hang. SEED=n replays a run.
class SharedMemoryCrashTest < Minitest::Test
  include Strata::TestSupport::ChildProcesses

  ROUNDS = 30
  BUILD_ROUNDS = 20
  BUILD_SIZE = 16 * 1024 * 1024
  MAX_BUILD_KILL_DELAY_US = 6000 # a 16 MiB build takes a few milliseconds

  def test_kill_9_writers_at_random_points
    seed = Integer(ENV.fetch("SEED") { Minitest.seed || Random.new_seed })
    puts "\n[crash] seed=#{seed} (SEED=#{seed} replays)"
    rng = Random.new(seed)
    Strata::TestSupport.with_tmpdir do |dir|
      loop = Strata::TestSupport::CrashLoop.new({path: File.join(dir, "crash.strata"), size: 4 * 1024 * 1024})
      begin
        killed = 0
        ROUNDS.times do |i|
          round = loop.round(rng.rand(2**31))
          assert_empty round.violations, "round #{i} (SEED=#{seed})"
          killed += round.killed
        end
        assert_equal ROUNDS * Strata::TestSupport::CrashLoop::DEFAULTS[:writers], killed
      ensure
        loop.close
      end
    end
  end

  # kill -9 at a random point of an open that builds a new file or rebuilds a bad one: the next open
  # gets a working table (table.h: an unfinished build is rebuilt).
  def test_kill_9_while_building_the_file
    each_build_crash(rebuild: :alternate) do |path, round|
      table = Strata::Tiers::SharedMemory.new(path: path, size: BUILD_SIZE, logger: QuietLogger.new)
      assert table.set("k", "v#{round}"), "round #{round}: set after a killed build"
      assert_equal "v#{round}", table.get("k")
      table.close
    end
  end

  # A rebuild writes a temporary file next to the table and renames it over; one killed before the
  # rename must not leave that file behind (each is as large as the table, on tmpfs: memory).
  def test_kill_9_during_a_rebuild_leaves_no_temporary_file
    each_build_crash(rebuild: true, check_leftovers: true) do |path, _round|
      Strata::Tiers::SharedMemory.new(path: path, size: BUILD_SIZE, logger: QuietLogger.new).close
    end
  end

  def test_values_validate_themselves
    value = Strata::TestSupport::CrashLoop.encode("k1", 2, 3, "\x00|pad".b)
    assert Strata::TestSupport::CrashLoop.valid?("k1", value)
    refute Strata::TestSupport::CrashLoop.valid?("k2", value), "a value filed under another key"
    refute Strata::TestSupport::CrashLoop.valid?("k1", value.byteslice(0, value.bytesize - 1)), "a truncated value"
    torn = value.dup
    torn.setbyte(4, torn.getbyte(4) ^ 1)
    refute Strata::TestSupport::CrashLoop.valid?("k1", torn), "a flipped byte"
    assert Strata::TestSupport::CrashLoop.valid_counter?("18446744073709551615")
    refute Strata::TestSupport::CrashLoop.valid_counter?("18446744073709551616")
    refute Strata::TestSupport::CrashLoop.valid_counter?("12a")
  end

  private

  # Swallows the rebuild warnings these tests cause on purpose.
  class QuietLogger
    def warn(*)
    end
  end

  # BUILD_ROUNDS times: leave a bad file at path (rebuild: true), no file (false), or each in turn
  # (:alternate); fork a child that opens it, so builds or rebuilds; kill -9 it after a random
  # delay; reap it; yield. With check_leftovers, only the table file may be left in the directory.
  def each_build_crash(rebuild:, check_leftovers: false)
    seed = Integer(ENV.fetch("SEED") { Minitest.seed || Random.new_seed })
    rng = Random.new(seed)
    Strata::TestSupport.with_tmpdir do |dir|
      path = File.join(dir, "build.strata")
      BUILD_ROUNDS.times do |round|
        damage = (rebuild == :alternate) ? round.odd? : rebuild
        Strata::Tiers::SharedMemory.new(path: path, size: BUILD_SIZE).close unless File.exist?(path)
        damage ? File.open(path, "r+b") { |file| file.pwrite("NOTSTRAT", 8) } : File.unlink(path) # keeps the magic
        pid = fork_child { Strata::Tiers::SharedMemory.new(path: path, size: BUILD_SIZE, logger: QuietLogger.new) }
        sleep(rng.rand(0..MAX_BUILD_KILL_DELAY_US) / 1_000_000.0) # picks the crash point
        refute_nil kill_and_reap(pid, 5), "round #{round}: the opener was reaped"
        yield path, round
      end
      if check_leftovers
        assert_equal ["build.strata"], Dir.children(dir).sort, "files left behind by killed openers (SEED=#{seed})"
      end
    end
  end
end
