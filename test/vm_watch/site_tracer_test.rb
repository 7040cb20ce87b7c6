# frozen_string_literal: true

require "test_helper"
require "strata/vm_watch"

# The debug-mode tracer on its own.
class VMWatchSiteTracerTest < Minitest::Test
  # A tracer whose bookkeeping breaks, as a bug in it would.
  class BrokenTracer < Strata::VMWatch::SiteTracer
    private

    def record(*)
      raise "the tracer broke"
    end
  end

  def test_a_failure_inside_the_hook_stops_the_tracing_not_the_traced_code
    tracer = BrokenTracer.new.start
    returned = 2.times { Object.new.extend(Comparable) }
    sites = tracer.stop

    assert_equal 2, returned
    assert_empty sites
    assert_equal "the tracer broke", tracer.error.message
  end

  def test_the_report_says_the_tracing_stopped
    report = Strata::VMWatch::Report.new(label: "GET /", deltas: {class_serial: 1}, sites: [],
      unattributed: {class_serial: 1}, debug: true, tracer_error: RuntimeError.new("the tracer broke"), at: Time.now)

    assert_includes report.message, "tracing stopped: RuntimeError: the tracer broke"
    assert_equal "RuntimeError: the tracer broke", report.to_h[:tracer_error]
  end

  def test_a_site_is_the_first_line_outside_ruby_and_the_gems
    tracer = Strata::VMWatch::SiteTracer.new.start
    planted_at = "#{__FILE__}:#{__LINE__ + 1}"
    Object.new.extend(Comparable)
    site = tracer.stop.fetch(0)

    assert_equal planted_at, site.location
    assert_equal planted_at, site.called_from
    assert_equal "Kernel#extend", site.operation
    assert_nil tracer.error
  end
end
