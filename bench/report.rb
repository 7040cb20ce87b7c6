# frozen_string_literal: true

require_relative "format"
require_relative "runner"
require_relative "stores"
require_relative "text_table"

module Strata
  module Bench
    # The text report: one table of ips with cases as rows and stores as columns, then for each
    # Strata store the ratio of its ips to every other column, then notes on anything odd.
    class Report
      # results: Result list; case_names and store_names: row and column order;
      # skipped: store name => reason, for stores that did not run at all.
      def initialize(results, case_names:, store_names:, skipped: {}, rounds: Runner::ROUNDS)
        @cells = results.to_h { |r| [[r.case_name, r.store], r] }
        @results = results
        @case_names = case_names
        @store_names = store_names
        @skipped = skipped
        @rounds = rounds
      end

      def render
        out = +""
        out << "iterations per second (higher is better; the median of #{@rounds} alternating rounds, ± half their spread; get_multi_100 counts calls of 100 keys)\n"
        out << table(["case", *@store_names], @case_names.map { |c| [c, *@store_names.map { |s| ips_cell(c, s) }] })
        out << "\n" << floor_table if floor_ran?
        ratio_stores.each { |strata| out << "\n" << ratio_table(strata) }
        out << notes
        out
      end

      private

      def ips_cell(case_name, store)
        result = @cells[[case_name, store]]
        return "-" unless result
        return "error" unless result.ok?

        "#{Format.ips(result.ips)} ±#{Format.pct(result.error_pct)}#{"!" if result.hit_mismatch?}"
      end

      def floor_ran?
        @results.any? { |r| r.store == Stores::FLOOR && r.ok? } && @store_names.size > 1
      end

      # Every store's ips as a share of the Rails API's floor on the same case.
      def floor_table
        others = @store_names - [Stores::FLOOR]
        title = "each store as a share of #{Stores::FLOOR} (Active Support's own work per call over a Hash; " \
          "a store passes 1.00 only where it does less than Active Support itself)\n"
        rows = @case_names.map { |c| [c, *others.map { |other| Format.ratio(ratio(c, other, Stores::FLOOR)) }] }
        title + table(["case", *others], rows)
      end

      def ratio_stores
        Stores::STRATA.select { |name| @results.any? { |r| r.store == name && r.ok? } }
      end

      def ratio_table(strata)
        others = @store_names - [strata]
        title = "#{strata} / each store (ips ratio; above 1 means #{strata} is faster)\n"
        return title + "  (no other store ran)\n" if others.empty?

        rows = @case_names.map { |c| [c, *others.map { |other| Format.ratio(ratio(c, strata, other)) }] }
        title + table(["case", *others], rows)
      end

      def ratio(case_name, numerator, denominator)
        top = @cells[[case_name, numerator]]
        bottom = @cells[[case_name, denominator]]
        return nil unless top&.ok? && bottom&.ok? && bottom.ips.positive?

        top.ips / bottom.ips
      end

      def notes
        lines = @skipped.map { |store, reason| "skipped #{store}: #{reason}" }
        @results.reject(&:ok?).each { |r| lines << "error in #{r.case_name}/#{r.store}: #{r.error}" }
        @results.select(&:hit_mismatch?).each do |r|
          lines << "! #{r.case_name}/#{r.store} gave #{Format.pct(r.hit_pct)} hits, " \
                   "expected #{Format.pct(r.expected_hit_pct)}: it lost or invented keys"
        end
        lines.empty? ? "" : "\n#{lines.join("\n")}\n"
      end

      def table(header, rows)
        TextTable.render(header, rows)
      end
    end
  end
end
