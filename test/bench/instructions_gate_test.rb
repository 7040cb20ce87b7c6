# frozen_string_literal: true

require "minitest/autorun"
require "fileutils"
require "stringio"
require "tmpdir"
require "yaml"
require_relative "../../bench/active_support_setup"
require_relative "../../bench/instructions/operations"
require_relative "../../bench/instructions/gate"

# bin/instructions' judgement on given counts: what fails, what passes, what --update writes. The
# counting itself (valgrind) runs in bin/test as the gate; here a stand-in measurement answers.
class InstructionsGateTest < Minitest::Test
  Result = Strata::Bench::Instructions::Measurement::Result

  # Answers each run with the next of the given count tables ({name => instructions per call}).
  class FixedMeasurement
    def initialize(profile, *runs)
      @profile = profile
      @runs = runs
    end

    def run(names, run_index)
      @runs.fetch(run_index - 1).slice(*names).to_h { |name, count| [name, Result.new(name, count, @profile)] }
    end
  end

  def setup
    @dir = Dir.mktmpdir("strata-test")
    @baseline = File.join(@dir, "baseline.yml")
    @profile = File.join(@dir, "callgrind.out.2")
    File.write(@profile, <<~PROFILE)
      version: 1
      creator: test
      cmd: probe
      events: Ir
      fl=tmp/x86_64-linux-gnu/strata_ext/3.1.2/../../../../ext/strata/table.c
      fn=planted_work
      1 900
      fn=strata_get
      1 100
      totals: 1000
    PROFILE
  end

  def teardown
    FileUtils.remove_entry(@dir)
  end

  def gate(*argv, runs:)
    out = StringIO.new
    status = Strata::Bench::Instructions::Gate.new(["--operations", "l1_get,l1_set", *argv], out: out, err: out,
      measurement: FixedMeasurement.new(@profile, *runs), baseline: @baseline).run
    [status, out.string]
  end

  def write_baseline(counts, ruby = RUBY_DESCRIPTION)
    File.write(@baseline, YAML.dump("ruby" => ruby, "activesupport" => ActiveSupport.version.to_s,
      "instructions" => counts))
  end

  def test_more_than_five_percent_over_the_baseline_fails_and_prints_that_operations_profile
    write_baseline("l1_get" => 1000, "l1_set" => 2000)
    status, out = gate(runs: [{"l1_get" => 1051.0, "l1_set" => 2000.0}])

    assert_equal 1, status
    assert_match(/^l1_get\s+1000\s+1051\s+1\.051x\s+REGRESSED$/, out)
    assert_match(/^l1_set\s+2000\s+2000\s+1\.000x$/, out)
    assert_match(/^900 \(90\.00%\)\s+ext\/strata\/table\.c:planted_work$/, out)
    assert_match(/^FAILED: l1_get over the baseline by more than 5%/, out)
  end

  def test_within_five_percent_either_way_passes_quietly
    write_baseline("l1_get" => 1000, "l1_set" => 2000)
    status, out = gate(runs: [{"l1_get" => 1049.0, "l1_set" => 1901.0}])

    assert_equal 0, status
    refute_match(/REGRESSED|FAILED|--update records/, out)
  end

  def test_more_than_five_percent_under_passes_with_a_hint_to_update
    write_baseline("l1_get" => 1000, "l1_set" => 2000)
    status, out = gate(runs: [{"l1_get" => 940.0, "l1_set" => 2000.0}])

    assert_equal 0, status
    assert_match(/^l1_get\s+1000\s+940\s+0\.940x\s+faster$/, out)
    assert_match(/^l1_get: more than 5% under the baseline; bin\/instructions --update records it$/, out)
  end

  def test_update_writes_the_counts_and_the_build_then_the_same_counts_pass
    write_baseline("l1_get" => 1000, "fetch_hit_l1" => 30_000)
    status, = gate("--update", runs: [{"l1_get" => 1200.4, "l1_set" => 1799.6}])

    assert_equal 0, status
    written = YAML.safe_load_file(@baseline)
    assert_equal({"l1_get" => 1200, "l1_set" => 1800, "fetch_hit_l1" => 30_000}, written["instructions"])
    assert_equal RUBY_DESCRIPTION, written["ruby"]
    assert_equal 0, gate(runs: [{"l1_get" => 1200.0, "l1_set" => 1800.0}]).first
  end

  def test_update_drops_the_counts_of_another_build
    write_baseline({"l1_get" => 10, "fetch_hit_l1" => 10}, "ruby 0.0.1")
    gate("--update", runs: [{"l1_get" => 1000.0, "l1_set" => 2000.0}])

    written = YAML.safe_load_file(@baseline)
    assert_equal({"l1_get" => 1000, "l1_set" => 2000}, written["instructions"])
    assert_equal RUBY_DESCRIPTION, written["ruby"]
  end

  def test_a_baseline_from_another_build_is_not_compared
    write_baseline({"l1_get" => 10, "l1_set" => 10}, "ruby 0.0.1")
    status, out = gate(runs: [{"l1_get" => 1000.0, "l1_set" => 2000.0}])

    assert_equal 0, status
    assert_match(/^not compared: .* was counted on ruby 0\.0\.1 with Active Support/, out)
  end

  def test_repeat_prints_each_run_and_judges_the_median
    write_baseline("l1_get" => 1000, "l1_set" => 2000)
    runs = [{"l1_get" => 1000.0, "l1_set" => 2000.0}, {"l1_get" => 1100.0, "l1_set" => 2000.0},
      {"l1_get" => 1002.0, "l1_set" => 2000.0}]
    status, out = gate("--repeat", "3", runs: runs)

    assert_equal 0, status
    assert_match(/^l1_get\s+1000\.0\s+1100\.0\s+1002\.0\s+9\.980%$/, out)
    assert_match(/^l1_get\s+1000\s+1002\s+1\.002x$/, out)
  end

  def test_an_unknown_operation_is_a_usage_error
    out = StringIO.new
    status = Strata::Bench::Instructions::Gate.new(%w[--operations l1_gets], out: out, err: out,
      measurement: FixedMeasurement.new(@profile), baseline: @baseline).run

    assert_equal 2, status
    assert_match(/unknown operations: l1_gets/, out.string)
  end
end
