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
            tiers(reports, phases), recoveries(reports, phases), statements(reports)].join("\n")
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
          tiered = reports.select(&:tiered?)
          headers = ["Phase"]
          headers += tiered.flat_map { |report| ["#{report.mode}: L1", "memcached", "SQL"] }
          headers += reports.map { |report| "#{report.mode}: memcached nodes" }
          headers += reports.map { |report| "#{report.mode}: DB statements/s" }
          table("Hit ratio per tier, and database statements per second", headers,
            phases.map do |phase|
              row = [phase.name]
              row += tiered.flat_map { |report| Report::TIERS.map { |tier| percent(report.tiers(phase)[tier]) } }
              row += reports.map { |report| percent(report.tiers(phase)[:memcached_nodes]) }
              row + reports.map { |report| report.tiers(phase)[:queries_per_second] }
            end)
        end

        def recoveries(reports, phases)
          rows = phases.select(&:fault).flat_map do |phase|
            reports.map do |report|
              hits, rates = report.recovery(phase).values_at(:hit_ratio, :requests)
              [phase.name, report.mode, percent(hits[:steady]), percent(hits[:dip]), seconds(hits[:seconds]),
                rates[:steady]&.round, rates[:dip]&.round, seconds(rates[:seconds])]
            end
          end
          table("Through each fault: the hit ratio (Strata's L1, else memcached's) and requests/s, #{Report::RECOVERY_WINDOW} s averages: " \
            "steady, the lowest until the next fault, and seconds after the fault ends until back to #{(Report::RECOVERED * 100).round}% of steady",
            ["Fault", "Store", "Hit ratio steady", "lowest", "back after", "req/s steady", "lowest", "back after"], rows)
        end

        def seconds(value)
          value ? "#{value} s" : "not before the next fault"
        end

        def statements(reports)
          reports.map do |report|
            table("#{report.mode}: the database's statements, most run first", ["Calls", "Statement"],
              report.statements.map { |calls, query| [calls, "`#{query.tr("|", "/")}`"] })
          end.join("\n")
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
