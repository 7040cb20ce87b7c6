# frozen_string_literal: true

module Strata
  module Bench
    module Cluster
      # What one mode's run of the cluster (Run) measured, per phase: the clients' requests per
      # second and latency per host, their errors (those on the connections of a worker a fault
      # killed counted apart), answers stale past the bound, how long each change took to reach
      # every host (the probers), each tier's hit ratio (Strata's L1 files; memcached's own
      # counters) and the database's transactions per second.
      class Report
        # Seconds after a change's acknowledgement past which an answer without it is stale past
        # the bound. README, "Consistency by layout" (L1 + SQL with the log): poll_interval after
        # the commit, on a loaded host more; while a host's poller holder is stopped, the lease
        # (1 s) before another process of the host takes it over. 1 s covers both.
        BOUND = 1.0
        TIERS = %i[l1 memcached sql].freeze
        RECOVERY_WINDOW = 3
        RECOVERED = 0.9

        attr_reader :mode, :phases, :faults, :statements

        # statements: the database's most run, [[calls, query], ...].
        def initialize(mode:, phases:, start:, records:, writes:, probes:, samples:, faults:, bound:, statements: [])
          @mode = mode
          @phases = phases
          @start = start
          @records = records
          @writes = writes
          @probes = probes
          @samples = samples
          @faults = faults
          @bound = bound
          @statements = statements
          @acks = acks
        end

        def hosts
          @records.keys
        end

        # Whether the app hosts' tiers were counted (Strata's L1 files).
        def tiered?
          @samples.any? { |sample| !sample[:l1].empty? }
        end

        # Per phase and host: {requests:, rps:, p50_ms:, p99_ms:, errors:, killed_worker_errors:,
        # stale_past_bound:, stale_within_bound:}.
        def requests(phase, host)
          (@requests ||= {})[[phase, host]] ||= count_requests(phase, host)
        end

        # Per phase, every host's requests together.
        def total(phase)
          rows = hosts.flat_map { |host| in_phase(@records.fetch(host), phase) }
          latencies = rows.select { |row| row[5] == 200 }.map { |row| row[1] }.sort
          per_host = hosts.map { |host| requests(phase, host) }
          {rps: rows.size.fdiv(phase.finish - phase.start).round, p50_ms: ms(percentile(latencies, 0.5)), p99_ms: ms(percentile(latencies, 0.99)),
           errors: per_host.sum { |row| row[:errors] }, killed_worker_errors: per_host.sum { |row| row[:killed_worker_errors] },
           stale_past_bound: per_host.sum { |row| row[:stale_past_bound] }}
        end

        # Per phase: the changes acknowledged in it, how long each took to be served by every host
        # (ms: p50, p99, max), how many a host that answered did not show within the probers'
        # limit (not_shown) or that a host did not answer for (not_answered: cut off, stopped),
        # and the writes that failed.
        def convergence(phase)
          changes = @writes.select { |_, _, acked| acked && within?(acked, phase) }.map(&:first)
          by_change = @probes.group_by(&:first)
          times = []
          missed = 0
          unanswered = 0
          changes.each do |change|
            probes = by_change.fetch(change, [])
            if probes.size == hosts.size && probes.all? { |probe| probe[2] }
              times << probes.map { |probe| probe[2] }.max
            elsif probes.any? { |probe| !probe[2] && probe[3] }
              missed += 1
            else
              unanswered += 1
            end
          end
          times.sort!
          {changes: changes.size, failed_writes: @writes.count { |_, _, acked, _, sent| acked.nil? && within?(sent, phase) },
           p50_ms: ms(percentile(times, 0.5)), p99_ms: ms(percentile(times, 0.99)), max_ms: ms(times.last),
           not_shown: missed, not_answered: unanswered}
        end

        # Per phase: each tier's hit ratio over the app hosts (Strata's counters; nil for the
        # other stores), memcached's own (its nodes' get_hits / gets) and the database's
        # transactions and statements per second.
        def tiers(phase)
          first = sample_at(@start + phase.start)
          last = sample_at(@start + phase.finish)
          return {} unless first && last

          ratios = TIERS.to_h do |tier|
            hits, misses = tier_counts(first, last, tier)
            [tier, ratio(hits, hits + misses)]
          end
          hits, misses = node_counts(first, last)
          ratios.merge(memcached_nodes: ratio(hits, hits + misses),
            transactions_per_second: per_second(first, last, :transactions), queries_per_second: per_second(first, last, :queries))
        end

        # One point per second of the load: [second, requests/s of every host, p99 ms].
        def timeline
          rows = hosts.flat_map { |host| @records.fetch(host) }
          by_second = rows.group_by { |row| (row[0] - @start).floor }
          (0...@phases.last.finish).map do |second|
            bucket = by_second.fetch(second, [])
            latencies = bucket.select { |row| row[5] == 200 }.map { |row| row[1] }.sort
            [second, bucket.size, ms(percentile(latencies, 0.99))]
          end
        end

        # [second, statements/s, L1 hit ratio, memcached nodes' hit ratio] between samples.
        def sample_timeline
          @samples.each_cons(2).filter_map do |first, last|
            second = (last[:at] - @start).round(1)
            next if second.negative? || second > @phases.last.finish

            seconds = last[:at] - first[:at]
            l1 = tier_counts(first, last, :l1)
            nodes = node_counts(first, last)
            [second, (last[:queries] - first[:queries]).fdiv(seconds).round, ratio(l1[0], l1.sum), ratio(nodes[0], nodes.sum)]
          end
        end

        # After a fault's phase: seconds from its mending until the cache's hit ratio (Strata's
        # L1, else the memcached nodes') and the requests per second, each averaged over
        # RECOVERY_WINDOW s, are back to RECOVERED of the first phase's; nil when not within the
        # run. The dip: the lowest of each such average during the fault and after it.
        def recovery(phase)
          steady = @phases.first
          mended = phase.finish
          hit_ratio = @samples.each_cons(2).filter_map do |first, last|
            nodes = node_counts(first, last)
            l1 = tier_counts(first, last, :l1)
            counts = l1.sum.positive? ? l1 : nodes
            [last[:at] - @start, counts[0], counts.sum]
          end
          rates = timeline.map { |second, count, _| [second + 1, count, 1] }
          # Until the next fault, or the end of the run.
          until_next = @phases.find { |later| later.fault && later.start >= mended }&.start || @phases.last.finish
          {hit_ratio: recovered(hit_ratio, steady, phase.start, mended, until_next),
           requests: recovered(rates, steady, phase.start, mended, until_next)}
        end

        # The invariants bin/test checks: answers stale past the bound and client errors but
        # those of a killed worker's connections, over the whole run.
        def violations
          totals = @phases.map { |phase| total(phase) }
          {stale_past_bound: totals.sum { |row| row[:stale_past_bound] }, errors: totals.sum { |row| row[:errors] }}
        end

        def to_h
          {mode: @mode, bound_s: @bound, faults: @faults.map { |fault| fault.except(:at) },
           phases: @phases.map do |phase|
             {name: phase.name, seconds: [phase.start, phase.finish], total: total(phase), hosts: hosts.to_h { |host| [host, requests(phase, host)] },
              convergence: convergence(phase), tiers: tiers(phase), recovery: (recovery(phase) if phase.fault)}
           end,
           statements: @statements, violations: violations,
           per_second: {requests: timeline, samples: sample_timeline}}
        end

        private

        # #requests, counted once: to_h, total and each table ask for the same phase and host.
        def count_requests(phase, host)
          rows = in_phase(@records.fetch(host), phase)
          answered = rows.select { |row| row[5] == 200 }
          latencies = answered.map { |row| row[1] }.sort
          failed = rows.reject { |row| row[5] == 200 }
          killed = failed.count { |row| killed_worker?(host, row) }
          stale = answered.map { |row| staleness(row) }
          {requests: rows.size, rps: rows.size.fdiv(phase.finish - phase.start).round, p50_ms: ms(percentile(latencies, 0.5)),
           p99_ms: ms(percentile(latencies, 0.99)), errors: failed.size - killed, killed_worker_errors: killed,
           stale_past_bound: stale.count(:past), stale_within_bound: stale.count(:within)}
        end

        # {id => [[acked, change], ...]} in order.
        def acks
          @writes.select { |_, _, acked| acked }.group_by { |_, id| id }.transform_values do |rows|
            rows.map { |change, _, acked| [acked, change] }.sort
          end
        end

        # :past when the answer lacks a change acknowledged more than bound before the request
        # started, :within when it lacks one acknowledged before it started, else nil.
        def staleness(row)
          acks = @acks[row[3]]
          return unless acks

          shown = row[4]
          late = latest(acks, row[0] - @bound)
          return :past if late && late > shown

          latest_now = latest(acks, row[0])
          :within if latest_now && latest_now > shown
        end

        # The latest change of acks acknowledged at or before at.
        def latest(acks, at)
          index = acks.bsearch_index { |acked, _| acked > at }
          last = (index || acks.size) - 1
          acks[last][1] if last >= 0
        end

        def killed_worker?(host, row)
          @faults.any? { |fault| fault[:fault] == :worker && fault[:host] == host && fault[:pid] == row[6] && row[0] + row[1] >= fault[:at] }
        end

        def in_phase(rows, phase)
          rows.select { |row| within?(row[0], phase) }
        end

        def within?(at, phase)
          at >= @start + phase.start && at < @start + phase.finish
        end

        def sample_at(at)
          @samples.find { |sample| sample[:at] >= at } || @samples.last
        end

        # [hits, misses] of tier (Strata's counters) over every app host between two samples.
        def tier_counts(first, last, tier)
          %i[hits misses].map { |figure| hosts.sum { |host| delta(first, last, :l1, host, tier, figure) } }
        end

        # [get_hits, get_misses] over every memcached node between two samples.
        def node_counts(first, last)
          %w[get_hits get_misses].map { |figure| last[:memcached].keys.sum { |node| delta(first, last, :memcached, node, figure) } }
        end

        # A counter's growth between two samples. Counters that started again count from 0: every
        # figure of a memcached node whose uptime went down (it was started again), a figure that
        # went down (a killed process's slot reclaimed).
        def delta(first, last, kind, host, *figures)
          later = last[kind][host]&.dig(*figures).to_i
          earlier = first[kind][host]&.dig(*figures).to_i
          restarted = last[kind][host]&.dig("uptime").to_i < first[kind][host]&.dig("uptime").to_i if kind == :memcached
          (later >= earlier && !restarted) ? later - earlier : later
        end

        # points: [[second, part, whole], ...] in order. The whole-weighted ratio of part over each
        # window of RECOVERY_WINDOW s: {steady:, dip:, seconds:} (the lowest window from from to
        # before, and the seconds after mended until a window that ends then is back to
        # RECOVERED of steady's, nil when none is before).
        def recovered(points, steady, from, mended, before)
          ratio = lambda do |window|
            whole = window.sum { |_, _, w| w }
            whole.positive? ? window.sum { |_, p, _| p }.fdiv(whole) : nil
          end
          base = ratio.call(points.select { |second, _, _| second > steady.start && second <= steady.finish })
          windows = points.each_cons(RECOVERY_WINDOW).filter_map do |window|
            value = ratio.call(window)
            [window.last[0], value] if value
          end
          after = windows.select { |second, _| second.between?(from, before) }
          dip = after.map(&:last).min
          back = after.find { |second, value| second >= mended + RECOVERY_WINDOW && value >= base * RECOVERED } if base
          {steady: base&.round(3), dip: dip&.round(3), seconds: back && (back[0] - mended).round(1)}
        end

        def per_second(first, last, figure)
          seconds = last[:at] - first[:at]
          (last[figure] - first[figure]).fdiv(seconds).round if seconds.positive?
        end

        def ratio(part, whole)
          whole.zero? ? nil : part.fdiv(whole).round(3)
        end

        def percentile(sorted, fraction)
          sorted.empty? ? nil : sorted[((sorted.size - 1) * fraction).round]
        end

        def ms(seconds)
          seconds && (seconds * 1000).round(1)
        end
      end
    end
  end
end
