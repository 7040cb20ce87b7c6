# frozen_string_literal: true

# The long crash loop: `ruby -Ilib -Itest test/torture/crash_loop.rb ROUNDS` (`rake torture` runs 1000).
# Forks writers, kills them with SIGKILL at random points and checks the table after each round
# (see test/support/crash_loop.rb). Prints progress and a summary; exits 1 on any violation or hang.
# SEED=n replays a run.

require "tmpdir"
require "fileutils"
require "support/crash_loop"

rounds = Integer(ARGV.fetch(0, "1000"))
seed = Integer(ENV.fetch("SEED") { Random.new_seed % 2**32 })
rng = Random.new(seed)
puts "crash loop: #{rounds} rounds, seed #{seed} (SEED=#{seed} replays)"

dir = Dir.mktmpdir("strata-torture")
File.chmod(0o700, dir)
failures = []
killed = 0
started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
loop = Strata::TestSupport::CrashLoop.new({path: File.join(dir, "torture.strata"), size: 4 * 1024 * 1024})
begin
  rounds.times do |i|
    round_seed = rng.rand(2**31)
    round = loop.round(round_seed)
    killed += round.killed
    unless round.violations.empty?
      failures << i
      warn "round #{i} (round seed #{round_seed}) FAILED:"
      round.violations.each { |violation| warn "  #{violation}" }
    end
    puts "  #{i + 1}/#{rounds} rounds, #{killed} writers killed, #{failures.size} failed" if ((i + 1) % 50).zero? || i + 1 == rounds
  end
  stats = loop.table.stats
  puts "parent stats: #{stats.slice(:hits, :misses, :sets, :evictions, :lock_timeouts, :owner_died_recoveries, :torn_reads, :entries).inspect}"
ensure
  loop.close
  FileUtils.remove_entry(dir)
end

elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
if failures.empty?
  puts format("PASS: %d rounds, %d writers killed, %.1fs", rounds, killed, elapsed)
else
  puts format("FAIL: %d of %d rounds had violations (first: round %d), seed %d, %.1fs", failures.size, rounds, failures.first, seed, elapsed)
  exit 1
end
