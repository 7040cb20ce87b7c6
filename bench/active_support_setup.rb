# frozen_string_literal: true

require "active_support"
require "active_support/cache"

# A Rails 7.1+ app gets this cache format from `load_defaults`; plain ActiveSupport still defaults
# to 7.0 (Marshal for every entry), which no current app would measure.
ActiveSupport::Cache.format_version = 7.1
