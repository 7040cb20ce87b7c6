# frozen_string_literal: true

require "test_helper"
require "json"
require_relative "rails_app"

# `bin/rails strata:stats`: the Railtie's rake task, run by Rake in a child Ruby in a tiny app
# whose config.cache_store is given by the test. It prints what `strata stats` prints for the
# store's tiers, builds no store itself, and fails for an app whose store is not :strata_store.
class StrataStatsTaskTest < Minitest::Test
  RailsApp = Strata::TestSupport::RailsApp
  # What bin/rails does with a task name: Rake's application, on the app's Rakefile.
  RAKE = 'require "rake"; Rake.application.run(ARGV)'

  def setup
    @dir = Strata::TestSupport.private_tmpdir
    @l1 = File.join(@dir, "tiny.l1")
    @sqlite = File.join(@dir, "tiny.sqlite3")
    @app = File.join(@dir, "app")
  end

  def teardown
    FileUtils.remove_entry(@dir)
  end

  def test_the_task_prints_the_hosts_figures_for_the_apps_store_and_builds_none
    RailsApp.tiny_app(@app, <<~RUBY)
      config.cache_store = :strata_store, {l1: {path: ENV.fetch("TINY_L1"), size: 1 << 20}, sql: {path: ENV.fetch("TINY_SQLITE")}}
    RUBY

    none = rake("strata:stats")
    assert_equal 1, none.status.exitstatus, "no tier could be read: #{none}"
    assert_includes none.out, "#{@l1}: no such file"
    assert_includes none.out, "#{@sqlite}: no such file"
    refute File.exist?(@l1), "the task made no L1 table"
    refute File.exist?(@sqlite), "nor an SQLite file"

    wrote = RailsApp.ruby(@app, "-e", <<~RUBY, env: env)
      require "./config/environment"
      Rails.cache.write("greeting", "hello") or abort "not written"
      Rails.cache.read("greeting") == "hello" or abort "not read"
    RUBY
    assert wrote.success?, wrote.to_s

    text = rake("strata:stats")
    assert text.success?, text.to_s
    assert_match(/^l1 +#{Regexp.escape(@l1)} +entries=1 /, text.out)
    assert_match(/^l3 +sqlite3:#{Regexp.escape(@sqlite)} +rows=1 /, text.out)
    assert_match(/^store .* read_hit=1 fetch_miss=0 write=1 /, text.out, "the host's counters, from the table")

    json = rake("strata:stats", "JSON" => "1")
    assert json.success?, json.to_s
    figures = JSON.parse(json.out.lines.last, symbolize_names: true)
    assert_equal [1, @l1], figures[:l1].values_at(:entries, :path)
    assert_equal 1, figures[:sql][:rows]
    assert_equal 1, figures[:store][:operations][:write][:count]
  end

  def test_an_app_whose_store_is_not_strata_store_is_told_so
    RailsApp.tiny_app(@app, "config.cache_store = :memory_store\n")
    result = rake("strata:stats")
    assert_equal 1, result.status.exitstatus, result.to_s
    assert_includes result.err, "strata:stats: Rails.cache in development is :memory_store, not :strata_store (config.cache_store)"
    assert_empty result.out
  end

  def test_the_task_is_listed
    RailsApp.tiny_app(@app, "config.cache_store = :null_store\n")
    result = rake("-T", "strata")
    assert result.success?, result.to_s
    assert_match(/^rake strata:stats +# Print this host's Strata cache figures/, result.out)
  end

  private

  def env(extra = {})
    {"TINY_L1" => @l1, "TINY_SQLITE" => @sqlite}.merge(extra)
  end

  def rake(*args, **extra)
    RailsApp.ruby(@app, "-e", RAKE, "--", *args, env: env(extra.transform_keys(&:to_s)))
  end
end
