# frozen_string_literal: true

require_relative "../format"
require_relative "../stores"
require_relative "../text_table"

module Strata
  module Bench
    # The client CPU table (cases as rows, client stores as columns, in µs of CPU per call) with
    # each other client's ratio to the yardstick, raw_socket; and the same figures for --json.
    class ClientCpuReport
      BASELINE = Stores::CLIENTS.first

      # samples: CpuSample list from ClientCpu#run.
      def initialize(samples)
        @samples = samples
        @cells = samples.to_h { |s| [[s.case_name, s.store], s] }
        @case_names = samples.map(&:case_name).uniq
        @store_names = Stores::CLIENTS.select { |name| samples.any? { |s| s.store == name } }
      end

      def render
        return "" if @samples.empty?

        others = @store_names - [BASELINE]
        header = ["case", *@store_names, *others.map { |name| "#{name}/#{BASELINE}" }]
        rows = @case_names.map do |c|
          [c, *@store_names.map { |s| us(@cells[[c, s]]) }, *others.map { |s| Format.ratio(ratio(c, s)) }]
        end
        "client CPU µs/call (lower is better; this process's CPU time, GC included; " \
          "get_multi_100 counts calls of 100 keys)\n#{TextTable.render(header, rows)}#{notes}"
      end

      # The "client_cpu" section of the JSON report.
      def to_json_section
        {
          "unit" => "microseconds per call", "baseline" => BASELINE,
          "results" => @samples.select(&:ok?).map do |s|
            {"store" => s.store, "case" => s.case_name, "calls" => s.ops, "cpu_us_per_op" => s.cpu_us_per_op.round(3),
             "wall_us_per_op" => s.wall_us_per_op.round(3), "cpu_ratio_to_baseline" => ratio(s.case_name, s.store)&.round(3)}
          end,
          "errors" => @samples.reject(&:ok?).map { |s| {"store" => s.store, "case" => s.case_name, "error" => s.error} }
        }
      end

      private

      def us(sample)
        return "-" unless sample
        return "error" unless sample.ok?

        Format.significant(sample.cpu_us_per_op)
      end

      def ratio(case_name, store)
        top = @cells[[case_name, store]]
        bottom = @cells[[case_name, BASELINE]]
        return nil unless top&.ok? && bottom&.ok? && bottom.cpu_us_per_op.positive?

        top.cpu_us_per_op / bottom.cpu_us_per_op
      end

      def notes
        lines = @samples.reject(&:ok?).map { |s| "error in client CPU #{s.case_name}/#{s.store}: #{s.error}" }
        lines.empty? ? "" : "#{lines.join("\n")}\n"
      end
    end
  end
end
