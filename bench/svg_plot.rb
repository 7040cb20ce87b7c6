# frozen_string_literal: true

require "cgi"
require "fileutils"
require_relative "format"
require_relative "stores"

module Strata
  module Bench
    # One SVG bar chart per case, written by hand: a horizontal bar per store, on a log scale,
    # because the stores span four decades and a linear axis would flatten all but the fastest.
    class SvgPlot
      WIDTH = 760
      LABEL_WIDTH = 130 # store names, left of the bars
      VALUE_WIDTH = 80  # the ips figure, right of the bars
      TOP = 50          # title and subtitle
      BOTTOM = 30       # decade labels
      ROW = 26
      BAR = 18
      STRATA_COLOR = "#d9480f"
      OTHER_COLOR = "#4c6ef5"

      def initialize(results, cases:)
        @results = results
        @cases = cases
      end

      # Writes DIR/CASE.svg per case that has a result; returns the paths.
      def write(dir)
        FileUtils.mkdir_p(dir)
        @cases.filter_map do |kase|
          rows = @results.select { |r| r.case_name == kase.name && r.ok? && r.ips.positive? }
          next if rows.empty?

          path = File.join(dir, "#{kase.name}.svg")
          File.write(path, chart(kase, rows))
          path
        end
      end

      private

      def chart(kase, rows)
        lo, hi = decades(rows.map(&:ips))
        plot_width = WIDTH - LABEL_WIDTH - VALUE_WIDTH
        height = TOP + rows.size * ROW + BOTTOM
        x = ->(ips) { LABEL_WIDTH + (Math.log10(ips) - lo) / (hi - lo) * plot_width }
        parts = [header(kase, height)]
        (lo..hi).each { |d| parts << gridline(x.call(10.0**d), height, decade_label(d)) }
        rows.each_with_index { |r, i| parts << bar(r, TOP + i * ROW, x) }
        parts << "</svg>\n"
        parts.join
      end

      # Whole decades around the data, at least one wide.
      def decades(values)
        lo = Math.log10(values.min).floor
        hi = Math.log10(values.max).ceil
        [lo, (hi > lo) ? hi : lo + 1]
      end

      # 10**d as 1, 10, 100, 1k, 10k ... 100G.
      def decade_label(d)
        return format("%g", 10.0**d) unless d.between?(0, 11)

        suffix_power = [d.clamp(0, 9) / 3 * 3, 0].max
        "#{10**(d - suffix_power)}#{{0 => "", 3 => "k", 6 => "M", 9 => "G"}.fetch(suffix_power)}"
      end

      def header(kase, height)
        <<~SVG
          <svg xmlns="http://www.w3.org/2000/svg" width="#{WIDTH}" height="#{height}" font-family="sans-serif" font-size="12">
          <rect width="100%" height="100%" fill="white"/>
          <text x="10" y="20" font-size="15" font-weight="bold">#{esc(kase.name)}: iterations per second (log scale)</text>
          <text x="10" y="38" fill="#555">#{esc(kase.describe)}</text>
        SVG
      end

      def gridline(x, height, label)
        %(<line x1="#{x.round(1)}" y1="#{TOP - 4}" x2="#{x.round(1)}" y2="#{height - BOTTOM}" stroke="#ddd"/>\n) +
          %(<text x="#{x.round(1)}" y="#{height - BOTTOM + 16}" text-anchor="middle" fill="#555">#{esc(label)}</text>\n)
      end

      def bar(result, y, x)
        color = Stores::STRATA.include?(result.store) ? STRATA_COLOR : OTHER_COLOR
        x0 = LABEL_WIDTH
        x1 = [x.call(result.ips), x0 + 1].max
        mid = y + BAR / 2 + 4
        %(<text x="#{x0 - 8}" y="#{mid}" text-anchor="end">#{esc(result.store)}</text>\n) +
          %(<rect x="#{x0}" y="#{y}" width="#{(x1 - x0).round(1)}" height="#{BAR}" fill="#{color}"/>\n) +
          %(<text x="#{(x1 + 6).round(1)}" y="#{mid}">#{esc(Format.ips(result.ips))}</text>\n)
      end

      def esc(text)
        CGI.escapeHTML(text.to_s)
      end
    end
  end
end
