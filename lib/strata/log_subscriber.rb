# frozen_string_literal: true

require "active_support/log_subscriber"

module Strata
  # Logs each invalidate.strata event (ActiveSupport::Cache::StrataStore#invalidate_tags) at
  # debug level, as Active Record logs its queries:
  #
  #   Strata invalidate (0.4ms)  tags: posts/1, posts
  #
  # colored when config.colorize_logging is on, and followed by the calling line ("↳
  # app/models/post.rb:12") when Strata.trace_invalidations puts it in the payload. The Railtie
  # attaches it in development, or wherever config.strata.log_invalidations is true; elsewhere
  # Strata::LogSubscriber.attach_to(:strata).
  class LogSubscriber < ActiveSupport::LogSubscriber
    def invalidate(event)
      payload = event.payload
      name = color("Strata invalidate (#{event.duration.round(1)}ms)", CYAN, bold: true)
      tags = color("tags: #{Array(payload[:tags]).join(", ")}", YELLOW, bold: true)
      debug("  #{name}  #{tags}")
      debug("  ↳ #{payload[:caller]}") if payload[:caller]
    end
    subscribe_log_level :invalidate, :debug
  end
end
