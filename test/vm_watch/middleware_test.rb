# frozen_string_literal: true

require "test_helper"
require "logger"
require "ostruct"
require "rack"
require "rack/lint"
require "rack/mock"
require "strata/vm_watch"
require "support/tiny_http_server"

# Strata::VMWatch as a Rack middleware in front of a tiny app: /plant invalidates, /clean does
# not.
class VMWatchMiddlewareTest < Minitest::Test
  # OpenStruct.new gives its object a singleton class, which Ruby 3.1 counts (class_serial).
  # Ruby 3.2+ counts no class creation, so there the plant is an extend (global_cvar_state).
  PLANTED_AT = "#{__FILE__}:#{__LINE__ + 1}"
  PLANT = RubyVM.stat.key?(:class_serial) ? -> { OpenStruct.new(a: 1) } : -> { Object.new.extend(Comparable) }

  APP = lambda do |env|
    PLANT.call if env["PATH_INFO"] == "/plant"
    [200, {"content-type" => "text/plain"}, ["ok"]]
  end

  def setup
    @log = StringIO.new
    @ring = Strata::VMWatch::Ring.new
    @events = []
    @subscriber = ActiveSupport::Notifications.subscribe(Strata::VMWatch::EVENT) { |event| @events << event.payload }
  end

  def teardown
    ActiveSupport::Notifications.unsubscribe(@subscriber)
  end

  def watch(app = APP, **options)
    Rack::Lint.new(Strata::VMWatch.new(Rack::Lint.new(app), logger: Logger.new(@log), ring: @ring, **options))
  end

  def get(app, path)
    Rack::MockRequest.new(app).get(path)
  end

  def test_debug_mode_names_the_line_that_planted_the_invalidation
    response = get(watch(debug: true), "/plant")

    assert_equal 200, response.status
    report = @ring.to_a.fetch(0)
    assert_equal "GET /plant", report.label
    refute_empty report.deltas
    site = report.sites.fetch(0)
    assert_equal PLANTED_AT, site.location
    assert_equal 1, report.sites.size, report.message
    assert_empty report.unattributed, report.message
    assert_includes @log.string, "GET /plant"
    assert_includes @log.string, PLANTED_AT
    assert_equal [PLANTED_AT], @events.fetch(0)[:sites].map { |s| s[:location] }
    assert_equal report.deltas, @events.fetch(0)[:deltas]
  end

  def test_a_clean_request_reports_nothing
    app = watch(debug: true)
    get(app, "/clean")
    get(app, "/clean")

    assert_empty @ring.to_a
    assert_empty @log.string
    assert_empty @events
  end

  def test_outside_debug_mode_the_counters_are_reported_without_sites
    get(watch, "/plant")

    report = @ring.to_a.fetch(0)
    refute_empty report.deltas
    assert_empty report.sites
    refute report.debug
    assert_equal 1, @events.size
  end

  def test_watching_a_clean_request_leaves_the_vm_caches_alone
    app = watch
    get(app, "/clean") # Rack::MockRequest and Lint load what they use on the first request.
    before = Strata::TestSupport.vm_cache_state
    get(app, "/clean")

    assert_equal before, Strata::TestSupport.vm_cache_state
  end

  def test_debug_tracing_of_a_clean_request_leaves_the_vm_caches_alone
    app = watch(debug: true)
    get(app, "/clean")
    before = Strata::TestSupport.vm_cache_state
    get(app, "/clean")

    assert_equal before, Strata::TestSupport.vm_cache_state
  end

  def test_the_ring_keeps_the_last_reports
    @ring = Strata::VMWatch::Ring.new(2)
    app = watch
    %w[/plant?1 /plant?2 /plant?3].each { |path| get(app, path) }

    assert_equal 2, @ring.to_a.size
    assert_equal 2, @ring.capacity
  end

  def test_a_ring_needs_a_positive_capacity
    error = assert_raises(ArgumentError) { Strata::VMWatch::Ring.new(0) }
    assert_includes error.message, "capacity"
  end

  def test_a_failing_subscriber_is_reported_and_the_request_still_answers
    ActiveSupport::Notifications.unsubscribe(@subscriber)
    @subscriber = ActiveSupport::Notifications.subscribe(Strata::VMWatch::EVENT) { raise "subscriber broke" }
    reported = []
    reporter = Object.new
    reporter.define_singleton_method(:report) { |error, **context| reported << [error, context] }
    ActiveSupport.error_reporter.subscribe(reporter)

    response = get(watch, "/plant")

    assert_equal 200, response.status
    assert_equal 1, @ring.to_a.size
    assert_match(/subscriber broke/, reported.fetch(0)[0].message)
    assert_equal Strata::VMWatch::EVENT, reported.fetch(0)[1][:source]
  ensure
    ActiveSupport.error_reporter.unsubscribe(reporter)
  end

  def test_a_request_that_raises_is_reported_and_its_error_goes_on
    failing = lambda do |_env|
      PLANT.call
      raise ArgumentError, "the app failed"
    end

    error = assert_raises(ArgumentError) { Strata::VMWatch.new(failing, debug: true, ring: @ring, logger: Logger.new(@log)).call(Rack::MockRequest.env_for("/boom")) }

    assert_equal "the app failed", error.message
    assert_equal [["GET /boom", [PLANTED_AT]]], @ring.to_a.map { |r| [r.label, r.sites.map(&:location)] }
  end

  def test_repeated_invalidations_from_one_line_are_one_site_counted_twice
    extended_at = "#{__FILE__}:#{__LINE__ + 3}"
    app = lambda do |_env|
      2.times do
        Object.new.extend(Comparable)
      end
      [200, {}, ["ok"]]
    end

    get(watch(app, debug: true), "/")

    report = @ring.to_a.fetch(0)
    assert_equal [[extended_at, "Kernel#extend", 2]], report.sites.map { |s| [s.location, s.operation, s.count] }
    assert_empty report.unattributed
  end

  def test_the_report_travels_over_real_http
    server = Strata::TinyHTTPServer.new(Strata::VMWatch.new(APP, debug: true, logger: Logger.new(@log), ring: @ring))

    assert_equal [200, "ok"], server.get("/plant")
    assert_equal [200, "ok"], server.get("/clean")

    assert_equal [["GET /plant", [PLANTED_AT]]], @ring.to_a.map { |r| [r.label, r.sites.map(&:location)] }
  ensure
    server&.close
  end
end
