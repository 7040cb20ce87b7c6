# frozen_string_literal: true

require "active_support/cache"

module ActiveSupport
  module Cache
    class StrataStore < Store
      # The one place a tier failure becomes a fallback (a miss, a false write) and the report of
      # the first of each outage to ActiveSupport.error_reporter and the log.
      module Failures
        SOURCE = "strata.cache"

        private

        # The one place a tier failure becomes a fallback (a miss, a false write): it is counted and
        # reported, and the caller carries on.
        def failsafe(fallback)
          yield
        rescue Strata::TierError, Strata::ValueTooLargeError => error
          report_failure(error)
          fallback
        end

        # Every tier failure, counted by the engine (Strata::Engine#report_failure).
        def report_failure(error, tier = nil)
          @engine.report_failure(error, tier)
        end

        # The engine's on_report, for the first failure of an outage (Strata::FailureReports):
        # logged (the store's logger, else Rails.logger) and reported to
        # ActiveSupport.error_reporter. A report after some were held back gives their number
        # (context :unreported).
        def told_failure(error, tier, held)
          server = error.server if error.respond_to?(:server)
          failure_logger&.warn("StrataStore #{tier || "-"}#{" #{server}" if server} #{error.class}: #{error.message}" \
            "#{" (#{held} more since the last report)" if held > 0}")
          ActiveSupport.error_reporter&.report(error, handled: true, severity: :warning, source: SOURCE,
            context: {tier: tier, server: server, unreported: (held if held > 0)}.compact)
        end

        # Where failures are logged: the store's logger, or Rails' when the store has none (Rails
        # gives cache stores no logger of their own).
        def failure_logger
          logger || (::Rails.logger if defined?(::Rails) && ::Rails.respond_to?(:logger))
        end
      end
    end
  end
end
