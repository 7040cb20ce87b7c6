# frozen_string_literal: true

module Strata
  module Bench
    module Cluster
      # The cluster run's reports (one Report per mode) as Markdown tables, the modes side by
      # side, one row per phase: what bin/cluster prints and docs/scale.md shows.
      module Tables
        module_function

        def markdown(reports)
          phases = reports.first.phases
          [requests(reports, phases), per_host(reports, phases), faults(reports, phases), convergence(reports, phases),
            tiers(reports, phases)].join("\n")
        end

        def requests(reports, phases)
          table("Requests, every app host (req/s, p50 / p99 ms)", ["Phase", *reports.map(&:mode)],
            phases.map do |phase|
              [phase.name, *reports.map { |report| cell(report.total(phase)) }]
            end)
        end

        def per_host(reports, phases)
          reports.map do |report|
            table("#{report.mode}: per host (req/s, p50 / p99 ms)", ["Phase", *report.hosts],
              phases.map { |phase| [phase.name, *report.hosts.map { |host| cell(report.requests(phase, host)) }] })
          end.join("\n")
        end

        def faults(reports, phases)
          table("Client errors (and the killed worker's) and answers stale past the bound", ["Phase", *reports.map(&:mode)],
            phases.map do |phase|
              [phase.name, *reports.map do |report|
                total = report.total(phase)
                "#{total[:errors]} (#{total[:killed_worker_errors]}), #{total[:stale_past_bound]} stale"
              end]
            end)
        end

        def convergence(reports, phases)
          reports.map do |report|
            table("#{report.mode}: changes, and the time until every host serves them (ms)",
              ["Phase", "Changes", "p50", "p99", "max", "not shown in 5 s", "host not answering", "writes failed"],
              phases.map do |phase|
                row = report.convergence(phase)
                [phase.name, row[:changes], row[:p50_ms], row[:p99_ms], row[:max_ms], row[:not_shown], row[:not_answered], row[:failed_writes]]
              end)
          end.join("\n")
        end

        def tiers(reports, phases)
          strata = reports.find { |report| report.mode == "Strata" }
          headers = ["Phase"]
          headers += ["Strata L1", "Strata memcached", "Strata SQL"] if strata
          headers += reports.map { |report| "#{report.mode}: memcached nodes" }
          headers += reports.map { |report| "#{report.mode}: DB xact/s" }
          table("Hit ratio per tier, and database transactions per second", headers,
            phases.map do |phase|
              row = [phase.name]
              row += Report::TIERS.map { |tier| percent(strata.tiers(phase)[tier]) } if strata
              row += reports.map { |report| percent(report.tiers(phase)[:memcached_nodes]) }
              row + reports.map { |report| report.tiers(phase)[:transactions_per_second] }
            end)
        end

        def cell(row)
          "#{row[:rps]}, #{row[:p50_ms] || "-"} / #{row[:p99_ms] || "-"}"
        end

        def percent(ratio)
          ratio ? format("%.1f%%", ratio * 100) : "-"
        end

        def table(title, headers, rows)
          lines = ["**#{title}**", "", "| #{headers.join(" | ")} |", "|#{"---|" * headers.size}"]
          lines += rows.map { |row| "| #{row.map { |value| value.nil? ? "-" : value }.join(" | ")} |" }
          "#{lines.join("\n")}\n"
        end
      end
    end
  end
end
