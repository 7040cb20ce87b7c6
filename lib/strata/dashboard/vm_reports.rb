# frozen_string_literal: true

require "time"

module Strata
  class Dashboard
    # The VM watch's recent reports (a VMWatch::Ring) as data.json carries them: the SHOWN
    # newest, newest first, each {time:, label:, deltas:, debug:, sites: [location, ...]} with
    # the locations of the SITES sites that moved the counters most (none outside debug mode).
    # Labels, which hold request paths, are cut to their first TEXT_BYTES bytes as the sampled
    # keys are; locations keep their last TEXT_BYTES, where the file name and line are.
    module VMReports
      SHOWN = 20
      SITES = 3
      TEXT_BYTES = 64

      module_function

      def read(ring)
        ring.to_a.last(SHOWN).reverse.map do |report|
          sites = report.sites.sort_by { |site| -site.deltas.sum { |_, growth| growth } }.first(SITES)
          {time: report.at.utc.iso8601, label: head(report.label), deltas: report.deltas, debug: report.debug,
           sites: sites.map { |site| tail(site.location) }}
        end
      end

      def head(text)
        utf8(text.to_s.byteslice(0, TEXT_BYTES))
      end

      def tail(text)
        text = text.to_s
        (text.bytesize > TEXT_BYTES) ? "…#{utf8(text.byteslice(-TEXT_BYTES, TEXT_BYTES))}" : utf8(text)
      end

      def utf8(bytes)
        bytes.dup.force_encoding(Encoding::UTF_8).scrub("?")
      end
    end
  end
end
