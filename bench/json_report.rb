# frozen_string_literal: true

require "json"

module Strata
  module Bench
    # Writes the run as JSON (`bin/bench --json`). "results" holds one object per measured cell, with
    # exactly store, case, ips and error_pct; the other sections hold what did not fit that shape.
    module JsonReport
      module_function

      # extras: section name => its JSON (the two-process, hit-ratio and footprint reports, client_cpu,
      # targets, miss_cost).
      def write(path, results:, skipped:, extras:, meta:)
        doc = {
          "results" => results.select(&:ok?).map do |r|
            {"store" => r.store, "case" => r.case_name, "ips" => r.ips.round(1), "error_pct" => r.error_pct.round(2)}
          end,
          "hit_pct" => results.select { |r| r.ok? && r.hit_pct }.map do |r|
            {"store" => r.store, "case" => r.case_name, "observed" => r.hit_pct.round(2), "expected" => r.expected_hit_pct}
          end,
          "errors" => results.reject(&:ok?).map { |r| {"store" => r.store, "case" => r.case_name, "error" => r.error} },
          "skipped" => skipped.map { |store, reason| {"store" => store, "reason" => reason} },
          "meta" => meta
        }
        extras.each { |name, section| doc[name.to_s] = section }
        File.write(path, JSON.pretty_generate(doc) + "\n")
      end
    end
  end
end
