# frozen_string_literal: true

require "active_support"
require "active_support/notifications"
require_relative "vm_watch/counters"
require_relative "vm_watch/report"
require_relative "vm_watch/ring"
require_relative "vm_watch/session"

module Strata
  # Rack middleware that tells which requests invalidate Ruby's VM caches (defining a class or a
  # constant, extend on an object, OpenStruct.new ...: each costs every thread its inline caches).
  #
  #   config.middleware.use Strata::VMWatch                      # the counters that moved
  #   config.middleware.use Strata::VMWatch, debug: true         # and the lines that moved them
  #
  # Per request it reads the RubyVM.stat counters before and after (Counters says which); a
  # request that moved any gets a Report, which goes to the log (warn), to the
  # "vm_cache.strata" ActiveSupport::Notifications event (payload: Report#to_h) and to a bounded
  # ring (VMWatch.ring unless given one) that a page can read. A clean request costs two reads
  # of the counters and reports nothing. debug: true traces each request (SiteTracer, several
  # times slower): for development and staging, not production traffic.
  #
  # What it measures: RubyVM.stat is process-wide, so in a threaded server a request's report
  # can include another thread's invalidation; debug mode only names sites on the request's
  # own thread. Work done while the server iterates the response body (a streamed body) comes
  # after #call returns and is not counted. Tests use Strata::VMWatch::Minitest (or ::RSpec).
  class VMWatch
    EVENT = "vm_cache.strata"

    # The process's default ring: the last Ring::DEFAULT_CAPACITY reports of every watch not
    # given its own.
    RING = Ring.new

    def self.ring
      RING
    end

    # logger: where reports go; Rails.logger when nil and Rails is loaded, else nowhere.
    # ring: a Ring, or nil for none.
    def initialize(app, debug: false, logger: nil, ring: RING)
      @app = app
      @debug = debug
      @logger = logger
      @ring = ring
    end

    def call(env)
      session = Session.new(debug: @debug).start
      @app.call(env)
    ensure
      report = session&.finish { "#{env["REQUEST_METHOD"]} #{env["SCRIPT_NAME"]}#{env["PATH_INFO"]}" }
      publish(report) if report
    end

    private

    # A failing logger or event subscriber must not fail the request: it is reported instead.
    def publish(report)
      @ring&.push(report)
      logger&.warn(report.message)
      ActiveSupport::Notifications.instrument(EVENT, report.to_h)
    rescue => e
      ActiveSupport.error_reporter&.report(e, handled: true, severity: :warning, source: EVENT)
    end

    def logger
      @logger || (::Rails.logger if defined?(::Rails) && ::Rails.respond_to?(:logger))
    end
  end
end
