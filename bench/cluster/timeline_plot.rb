# frozen_string_literal: true

require "cgi"

module Strata
  module Bench
    module Cluster
      # A line chart over the seconds of a cluster run, in SVG written by hand (as SvgPlot's
      # bars): one line per series on a linear axis from 0, the faults' phases shaded and named.
      class TimelinePlot
        WIDTH = 760
        HEIGHT = 300
        LEFT = 60
        RIGHT = 20
        TOP = 50
        BOTTOM = 60
        COLORS = ["#d9480f", "#4c6ef5", "#2b8a3e", "#862e9c", "#e67700", "#1098ad"].freeze
        LEGEND_COLUMNS = 3

        # series: {label => [[second, value or nil], ...]}; phases: Run::Phase rows (those with a
        # fault are shaded).
        def initialize(title:, unit:, series:, phases:)
          @title = title
          @unit = unit
          @series = series
          @phases = phases
        end

        def to_svg
          values = @series.values.flatten(1).filter_map(&:last)
          @top = nice(values.max || 1)
          @last = @phases.last.finish
          parts = [header]
          @phases.select(&:fault).each { |phase| parts << band(phase) }
          5.times { |step| parts << gridline(@top * step / 4.0) }
          @series.each_with_index { |(label, points), index| parts << line(points, COLORS[index % COLORS.size]) << legend(label, index) }
          parts << axis_labels << "</svg>\n"
          parts.join
        end

        private

        def header
          %(<svg xmlns="http://www.w3.org/2000/svg" width="#{WIDTH}" height="#{HEIGHT}" font-family="sans-serif" font-size="12">\n) +
            %(<rect width="100%" height="100%" fill="white"/>\n) +
            %(<text x="10" y="20" font-size="15" font-weight="bold">#{esc(@title)}</text>\n)
        end

        def x(second)
          (LEFT + second.fdiv(@last) * (WIDTH - LEFT - RIGHT)).round(1)
        end

        def y(value)
          (HEIGHT - BOTTOM - value.fdiv(@top) * (HEIGHT - TOP - BOTTOM)).round(1)
        end

        def band(phase)
          %(<rect x="#{x(phase.start)}" y="#{TOP}" width="#{(x(phase.finish) - x(phase.start)).round(1)}" height="#{HEIGHT - TOP - BOTTOM}" fill="#fff3bf"/>\n) +
            %(<text x="#{x(phase.start) + 2}" y="#{TOP + 12}" font-size="10" fill="#666">#{esc(phase.name)}</text>\n)
        end

        def gridline(value)
          %(<line x1="#{LEFT}" y1="#{y(value)}" x2="#{WIDTH - RIGHT}" y2="#{y(value)}" stroke="#ddd"/>\n) +
            %(<text x="#{LEFT - 6}" y="#{y(value) + 4}" text-anchor="end" fill="#555">#{label(value)}</text>\n)
        end

        # A gap (nil) breaks the line.
        def line(points, color)
          runs = points.chunk_while { |a, b| a[1] && b[1] }.select { |run| run.first[1] }
          runs.map do |run|
            coordinates = run.map { |second, value| "#{x(second)},#{y(value)}" }.join(" ")
            %(<polyline fill="none" stroke="#{color}" stroke-width="1.5" points="#{coordinates}"/>\n)
          end.join
        end

        def legend(label, index)
          lx = LEFT + index % LEGEND_COLUMNS * 230
          ly = HEIGHT - 28 + index / LEGEND_COLUMNS * 15
          %(<rect x="#{lx}" y="#{ly - 9}" width="14" height="4" fill="#{COLORS[index % COLORS.size]}"/>\n) +
            %(<text x="#{lx + 20}" y="#{ly - 3}">#{esc(label)}</text>\n)
        end

        def axis_labels
          (0..@last).step(10).map { |second| %(<text x="#{x(second)}" y="#{HEIGHT - BOTTOM + 16}" text-anchor="middle" fill="#555">#{second} s</text>\n) }.join +
            %(<text x="10" y="38" fill="#555">#{esc(@unit)}</text>\n)
        end

        # 1, 2 or 5 times a power of ten, at least value.
        def nice(value)
          return 1 unless value.positive?

          power = 10**Math.log10(value).floor
          [1, 2, 5, 10].map { |m| m * power }.find { |top| top >= value }
        end

        def label(value)
          (value >= 10 || value.zero?) ? value.round.to_s : format("%.2g", value)
        end

        def esc(text)
          CGI.escapeHTML(text.to_s)
        end
      end
    end
  end
end
