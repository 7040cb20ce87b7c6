# frozen_string_literal: true

module Strata
  module Bench
    # Number formats shared by the text table and the charts, and the one-line form of an error
    # that a cell or report prints instead of its figures.
    module Format
      module_function

      # "Class: first line of the message".
      def error(exception)
        "#{exception.class}: #{exception.message.lines.first&.strip}"
      end

      # 12345678 -> "12.3M"; three significant digits are all a benchmark can vouch for.
      def ips(value)
        return "-" if value.nil?

        [[1e9, "G"], [1e6, "M"], [1e3, "k"]].each do |scale, suffix|
          return "#{significant(value / scale)}#{suffix}" if value >= scale
        end
        significant(value)
      end

      def significant(value)
        return format("%.0f", value) if value >= 100
        return format("%.1f", value) if value >= 10
        return format("%.2f", value) if value >= 1

        format("%.2g", value)
      end

      def ratio(value)
        return "-" if value.nil?

        "#{significant(value)}x"
      end

      def pct(value)
        return "-" if value.nil?

        (value >= 10) ? format("%.0f%%", value) : format("%.1f%%", value)
      end
    end
  end
end
