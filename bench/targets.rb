# frozen_string_literal: true

require "yaml"
require_relative "cases"
require_relative "format"
require_relative "paired_ratio"
require_relative "stores"
require_relative "text_table"

module Strata
  module Bench
    # The speed targets of bench/targets.yml, each a ratio of two stores' ips on one case, with
    # the ratio this run measured and whether it met the target. Targets whose stores or case did
    # not run are left out. The ratio is a PairedRatio; the JSON report also gives the ratio of the
    # two cells' medians, which is what the ratio tables print.
    class Targets
      Target = Struct.new(:case_name, :store, :other, :min, keyword_init: true)

      FILE = File.expand_path("targets.yml", __dir__)

      # The targets in path, checked against the stores and cases the bench knows.
      def self.load(path = FILE)
        YAML.safe_load_file(path).map do |row|
          Stores.find(row.fetch("store"))
          Stores.find(row.fetch("other"))
          Cases.find(row.fetch("case"))
          Target.new(case_name: row["case"], store: row["store"], other: row["other"], min: ratio(row.fetch("min")))
        end.freeze
      end

      # A number, or "a/b".
      def self.ratio(min)
        return Float(min) unless min.is_a?(String) && min.include?("/")

        top, bottom = min.split("/", 2)
        Float(top) / Float(bottom)
      end

      ALL = load

      # results: the matrix's Result list.
      def initialize(results)
        @cells = results.to_h { |r| [[r.case_name, r.store], r] }
      end

      def render
        rows = measured.map do |t, ratio|
          ["#{t.store} #{t.case_name} >= #{format("%.3g", t.min)}x #{t.other}",
            Format.ratio(ratio), ratio ? verdict(t, ratio) : "-"]
        end
        return "" if rows.empty?

        "targets (ips ratio of the first store to the second: the median of the per-round ratios)\n" +
          TextTable.render(%w[target measured verdict], rows)
      end

      # The "targets" section of the JSON report.
      def to_json_section
        measured.map do |t, ratio, of_medians|
          {"case" => t.case_name, "store" => t.store, "other" => t.other, "min_ratio" => t.min,
           "ratio" => ratio&.round(3), "ratio_of_medians" => of_medians&.round(3), "met" => !ratio.nil? && ratio >= t.min}
        end
      end

      private

      # [target, paired ratio, ratio of medians] for each target whose two cells ran; the ratios
      # are nil when one of them failed.
      def measured
        ALL.filter_map do |t|
          top = @cells[[t.case_name, t.store]]
          bottom = @cells[[t.case_name, t.other]]
          next unless top && bottom
          next [t, nil, nil] unless top.ok? && bottom.ok? && bottom.ips.positive?

          [t, PairedRatio.of(top, bottom), top.ips / bottom.ips]
        end
      end

      def verdict(target, ratio)
        (ratio >= target.min) ? "met" : "not met"
      end
    end
  end
end
