# frozen_string_literal: true

require_relative "counters"
require_relative "report"
require_relative "site_tracer"

module Strata
  class VMWatch
    # One watched stretch of work (a request, a test) on the current thread: the counters at
    # #start and #finish, and in debug mode the sites in between. Outside debug mode it reads the
    # counters twice and allocates two small Arrays; it defines nothing, so watching a clean
    # request leaves RubyVM.stat as it was.
    class Session
      def initialize(debug: false)
        @tracer = SiteTracer.new if debug
      end

      # The tracer goes on first, so enabling it is outside the measured stretch.
      def start
        @tracer&.start
        @before = Counters.read
        self
      end

      # A Report if any counter moved, else nil. label is a String, or a block that makes one
      # (called only for a Report, so a clean request builds no String).
      def finish(label = nil)
        after = Counters.read
        sites = @tracer ? @tracer.stop : []
        deltas = Counters.delta(@before, after)
        return if deltas.empty?

        Report.new(label: block_given? ? yield : label, deltas: deltas, sites: sites,
          unattributed: unattributed(deltas, sites), debug: !@tracer.nil?, tracer_error: @tracer&.error, at: Time.now)
      end

      private

      def unattributed(deltas, sites)
        return {} unless @tracer

        explained = Hash.new(0)
        sites.each { |site| site.deltas.each { |key, growth| explained[key] += growth } }
        deltas.to_h { |key, growth| [key, growth - explained[key]] }.select { |_, rest| rest.positive? }
      end
    end
  end
end
