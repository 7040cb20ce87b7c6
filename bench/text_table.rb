# frozen_string_literal: true

module Strata
  module Bench
    # Plain-text tables for the reports: first column left-aligned, the rest right-aligned, two
    # spaces between columns.
    module TextTable
      module_function

      # header: cells of the first line; rows: arrays of cells. Returns the lines, each ending "\n".
      def render(header, rows)
        widths = header.each_index.map { |i| ([header] + rows).map { |row| row[i].to_s.length }.max }
        [header, *rows].map do |row|
          row.each_with_index.map { |cell, i| i.zero? ? cell.to_s.ljust(widths[i]) : cell.to_s.rjust(widths[i]) }
            .join("  ").rstrip + "\n"
        end.join
      end
    end
  end
end
