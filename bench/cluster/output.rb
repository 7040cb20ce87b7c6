# frozen_string_literal: true

require "fileutils"
require "json"
require_relative "tables"
require_relative "timeline_plot"

module Strata
  module Bench
    module Cluster
      # A cluster run's output: the tables (Tables), and in a directory, the same as
      # tables.md, the figures as results.json and the plots over time as SVG.
      class Output
        def initialize(reports)
          @reports = reports
          @phases = reports.first.phases
        end

        def markdown
          Tables.markdown(@reports)
        end

        # Writes DIR/tables.md, DIR/results.json and DIR/*.svg; returns the paths.
        def write(dir)
          FileUtils.mkdir_p(dir)
          files = {"tables.md" => markdown, "results.json" => JSON.pretty_generate(@reports.map(&:to_h))}
          plots.each { |name, plot| files["#{name}.svg"] = plot.to_svg }
          files.map do |name, text|
            path = File.join(dir, name)
            File.write(path, text)
            path
          end
        end

        private

        def plots
          timelines = @reports.to_h { |report| [report.mode, report.timeline] }
          samples = @reports.to_h { |report| [report.mode, report.sample_timeline] }
          plots = {
            "requests" => plot("Requests per second, every app host", "requests/s", timelines.transform_values { |points| points.map { |s, rps, _| [s, rps] } }),
            "p99" => plot("p99 latency per second, every app host", "ms", timelines.transform_values { |points| points.map { |s, _, p99| [s, p99] } }),
            "queries" => plot("Database statements per second", "statements/s", samples.transform_values { |points| points.map { |s, queries| [s, queries] } })
          }
          hit_ratios = @reports.select(&:tiered?).to_h { |report| ["#{report.mode}: L1", samples[report.mode].map { |s, _, l1| [s, l1] }] }
          @reports.each do |report|
            points = samples[report.mode].map { |s, _, _, nodes| [s, nodes] }
            hit_ratios["#{report.mode}: memcached"] = points if points.any?(&:last) # none: no cache
          end
          plots.merge("hit_ratio" => plot("Hit ratio: Strata's L1, and the memcached nodes' own", "hit ratio", hit_ratios))
        end

        def plot(title, unit, series)
          TimelinePlot.new(title: title, unit: unit, series: series, phases: @phases)
        end
      end
    end
  end
end
