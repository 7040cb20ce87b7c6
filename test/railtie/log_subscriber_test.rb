# frozen_string_literal: true

require "test_helper"
require "logger"
require "stringio"
require "active_support/cache/strata_store"
require "strata/log_subscriber"
require_relative "rails_app"

# Strata::LogSubscriber logs the invalidate.strata events of a real store (L1 in a private
# directory), one debug line each, colored as Active Record's when colorize_logging is on.
class StrataLogSubscriberTest < Minitest::Test
  LINE = %r{\A  Strata invalidate \(\d+\.\dms\)  tags: post/1, post/1/comments\n\z}

  def setup
    @dir = Strata::TestSupport.private_tmpdir
    @store = ActiveSupport::Cache::StrataStore.new(l1: {path: File.join(@dir, "log.l1"), size: 1 << 20})
    @log = StringIO.new
    logger = Logger.new(@log, level: Logger::DEBUG)
    logger.formatter = proc { |_severity, _time, _progname, message| "#{message}\n" }
    @logger_before = ActiveSupport::LogSubscriber.logger
    @colorize_before = ActiveSupport::LogSubscriber.colorize_logging
    ActiveSupport::LogSubscriber.logger = logger
    ActiveSupport::LogSubscriber.colorize_logging = false
    Strata::LogSubscriber.attach_to(:strata)
  end

  def teardown
    Strata::LogSubscriber.detach_from(:strata)
    ActiveSupport::LogSubscriber.logger = @logger_before
    ActiveSupport::LogSubscriber.colorize_logging = @colorize_before
    Strata.trace_invalidations = false
    @store.close
    FileUtils.remove_entry(@dir)
  end

  def test_an_invalidation_is_one_debug_line_with_its_tags
    assert @store.invalidate_tags("post/1", "post/1/comments")
    assert_match LINE, @log.string
  end

  def test_the_line_is_colored_when_colorize_logging_is_on
    ActiveSupport::LogSubscriber.colorize_logging = true
    @store.invalidate_tags(["post/1"])
    assert_match(%r{\A  \e\[1m\e\[36mStrata invalidate \(\d+\.\dms\)\e\[0m  \e\[1m\e\[33mtags: post/1\e\[0m\n\z}, @log.string)
  end

  def test_the_calling_line_follows_when_invalidations_are_traced
    Strata.trace_invalidations = true
    line = __LINE__ + 1
    @store.invalidate_tags("post/1", "post/1/comments")
    first, second = @log.string.lines
    assert_match LINE, first
    assert_match(/\A  ↳ #{Regexp.escape(__FILE__)}:#{line}:in /, second)
  end

  def test_nothing_is_logged_above_debug_level
    ActiveSupport::LogSubscriber.logger.level = Logger::INFO
    @store.invalidate_tags("post/1")
    assert_empty @log.string
  end
end

# The Railtie attaches the subscriber in development, and elsewhere when
# config.strata.log_invalidations is true; false turns it off in development too. A tiny app in
# a child Ruby, its log in log/app.log.
class StrataRailtieLogTest < Minitest::Test
  RailsApp = Strata::TestSupport::RailsApp
  INVALIDATE = <<~RUBY
    require "./config/environment"
    Rails.cache.invalidate_tags("bugs/42", "bugs")
    Rails.logger.info("done")
  RUBY

  def setup
    @dir = Strata::TestSupport.private_tmpdir
    @app = RailsApp.tiny_app(File.join(@dir, "app"), <<~RUBY)
      config.cache_store = :strata_store, {l1: {path: ENV.fetch("TINY_L1"), size: 1 << 20}}
      config.strata.log_invalidations = {"on" => true, "off" => false}[ENV["TINY_LOG"]]
    RUBY
  end

  def teardown
    FileUtils.remove_entry(@dir)
  end

  def test_invalidations_are_logged_in_development_or_when_turned_on
    {["development", nil] => true, ["production", nil] => false, ["production", "on"] => true, ["development", "off"] => false}
      .each do |(env, setting), logged|
        log = invalidate(env, setting)
        assert_includes log, "done", "#{env}, #{setting.inspect}: the app ran"
        if logged
          assert_match(%r{Strata invalidate \(\d+\.\dms\).*tags: bugs/42, bugs}, log, "#{env}, #{setting.inspect}")
        else
          refute_includes log, "Strata invalidate", "#{env}, #{setting.inspect}"
        end
      end
  end

  private

  # The app's log of one run in env with TINY_LOG=setting.
  def invalidate(env, setting)
    log = File.join(@app, "log/app.log")
    FileUtils.rm_f(log)
    env_vars = {"RAILS_ENV" => env, "TINY_LOG" => setting, "TINY_L1" => File.join(@dir, "#{env}.l1")}
    result = RailsApp.ruby(@app, "-e", INVALIDATE, env: env_vars)
    assert result.success?, result.to_s
    File.read(log)
  end
end
