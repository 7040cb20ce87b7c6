# frozen_string_literal: true

require_relative "format"
require_relative "paired_ratio"
require_relative "stores"
require_relative "text_table"

module Strata
  module Bench
    # The speed targets set as a ratio of two stores' ips on one case: each
    # with the ratio this run measured and whether it met the target. Targets whose stores or case
    # did not run are left out. (The miss cost target, a ratio of times, is MissCost's.)
    # The ratio is a PairedRatio; the JSON report also gives the ratio of the two cells' medians,
    # which is what the ratio tables print.
    class Targets
      Target = Struct.new(:case_name, :store, :other, :min, keyword_init: true)

      # "At most 1.05x slower than raw_socket", as a ratio of ips.
      NEAR_RAW = 1 / 1.05

      ALL = [
        *%w[hit_30b set_30b hit_25kb set_25kb].map do |case_name|
          Target.new(case_name: case_name, store: Stores::StrataMemcached::NAME,
            other: Stores::RawSocket::NAME, min: NEAR_RAW)
        end,
        *%w[hit_30b set_30b].map do |case_name|
          Target.new(case_name: case_name, store: Stores::StrataMemcached::NAME,
            other: Stores::DalliClient::NAME, min: 1.3)
        end,
        Target.new(case_name: "get_multi_100", store: Stores::StrataMemcached::NAME,
          other: Stores::DalliClient::NAME, min: 1.0),
        Target.new(case_name: "hit_30b", store: Stores::StrataStoreL2::NAME,
          other: Stores::MemCacheStore::NAME, min: 1.2),
        Target.new(case_name: "hit_30b", store: Stores::StrataSQL::NAME,
          other: Stores::SolidCacheStore::NAME, min: 1.0),
        Target.new(case_name: "hit_30b", store: Stores::StrataStoreFull::NAME,
          other: Stores::MemCacheStore::NAME, min: 25.0)
      ].freeze

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
