# frozen_string_literal: true

module Strata
  class VMWatch
    # One call site that moved the VM cache counters (debug mode). location is the first frame
    # outside Ruby's library and the installed gems ("file:line"), the line to fix; called_from is
    # the frame that made the call, which may be a gem's or Ruby's (ostruct.rb); operation names the
    # call ("OpenStruct.new", "Object#extend", "class Foo"); deltas are {counter => growth}
    # summed over count calls from the same place.
    Site = Struct.new(:location, :called_from, :operation, :deltas, :count, keyword_init: true) do
      def to_s
        via = (called_from == location) ? "" : " (via #{called_from})"
        "#{location}: #{operation}#{via} #{Report.format_deltas(deltas)}#{" x#{count}" if count > 1}"
      end
    end

    # What one request or test did to the VM caches. deltas: {counter => growth}, only the
    # counters that moved. sites: Sites, empty unless debug mode. unattributed: the part of deltas
    # no site accounts for (debug mode; a constant assigned with `X = ...`, or another thread's
    # work, RubyVM.stat being process-wide), {} when the sites explain everything. tracer_error:
    # the exception that stopped the tracing part way (a bug in the watch), else nil.
    Report = Struct.new(:label, :deltas, :sites, :unattributed, :debug, :tracer_error, :at, keyword_init: true) do
      def self.format_deltas(deltas)
        deltas.map { |key, growth| "#{key} +#{growth}" }.join(", ")
      end

      # One line for a log, then a line per site.
      def message
        lines = ["VM caches invalidated by #{label}: #{Report.format_deltas(deltas)}"]
        sites.each { |site| lines << "  #{site}" }
        lines << "  not attributed: #{Report.format_deltas(unattributed)}" if debug && !unattributed.empty?
        lines << "  tracing stopped: #{tracer_error.class}: #{tracer_error.message}" if tracer_error
        lines.join("\n")
      end

      # The ActiveSupport::Notifications payload.
      def to_h
        super.merge(sites: sites.map(&:to_h), tracer_error: tracer_error&.then { |e| "#{e.class}: #{e.message}" })
      end
    end
  end
end
