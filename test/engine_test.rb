# frozen_string_literal: true

require "test_helper"
require "open3"
require "strata/engine"

# Strata::Engine: the tiers, stack, counters, poller and failure reports, built and closed
# together, with no Rails.
class EngineTest < Minitest::Test
  include Strata::TestSupport

  ROOT = File.expand_path("..", __dir__)

  def test_it_loads_and_works_without_the_rails_adapter
    script = <<~RUBY
      require "strata/engine"
      engine = Strata::Engine.new(l1: {path: File.join(ARGV[0], "engine.l1"), size: 4 << 20})
      stored = engine.write("k", "v", tags: ["t"])
      read = engine.fetch("k") { "computed" }
      engine.invalidate_tags("t")
      again = engine.fetch("k") { "computed" }
      engine.close
      print [stored, read, again, defined?(ActiveSupport::Cache).inspect, defined?(ActiveRecord).inspect].join(" ")
    RUBY
    with_tmpdir do |dir|
      out, err, status = Open3.capture3(RbConfig.ruby, "-rbundler/setup", "-I#{ROOT}/lib", "-e", script, dir)

      assert status.success?, err
      assert_equal "true v computed nil nil", out
    end
  end

  def test_a_failure_is_counted_and_told_once_per_outage_of_its_kind
    told = []
    with_tmpdir do |dir|
      engine = Strata::Engine.new(l1: {path: File.join(dir, "engine.l1"), size: 4 << 20},
        on_report: ->(error, tier, held) { told << [error.message, tier, held] })
      3.times { engine.report_failure(Strata::TierError.new("down"), :l2) }
      engine.report_failure(Strata::TierError.new("also down"), :l3)

      assert_equal [["down", :l2, 0], ["also down", :l3, 0]], told
      assert_equal({"Strata::TierError" => 4}, engine.stats[:failures])
      assert_equal 2, engine.stats[:unreported]
    ensure
      engine&.close
    end
  end

  def test_without_a_reporter_failures_are_counted_only
    with_tmpdir do |dir|
      engine = Strata::Engine.new(l1: {path: File.join(dir, "engine.l1"), size: 4 << 20})
      engine.report_failure(Strata::TierError.new("down"), :l1)

      assert_equal({"Strata::TierError" => 1}, engine.stats[:failures])
    ensure
      engine&.close
    end
  end

  def test_its_layout_decides_what_it_builds
    with_tmpdir do |dir|
      engine = Strata::Engine.new(l1: {path: File.join(dir, "engine.l1"), size: 4 << 20}, sql: {path: File.join(dir, "cache.sqlite3")})

      assert_equal %i[l1 l3], engine.stack.tier_names
      assert_nil engine.poller, "an embedded SQLite file has no other host to hear of"
      assert_nil engine.app_sql, "the SQL tier is on connections of its own"
      assert_empty engine.unlisted_tiers
      assert_kind_of Hash, engine.stats[:counters]
    ensure
      engine&.close
    end
  end

  def test_a_layout_it_cannot_build_is_an_argument_error_naming_the_option
    error = assert_raises(ArgumentError) { Strata::Engine.new }
    assert_match(/l1: \{size: bytes\}/, error.message)
    error = assert_raises(ArgumentError) { Strata::Engine.new(memcached: {}) }
    assert_match(/memcached: \{servers:/, error.message)
    error = assert_raises(ArgumentError) { Strata::Engine.new(sql: "cache.sqlite3") }
    assert_match(/sql: \{path:/, error.message)
  end
end
