# frozen_string_literal: true

# Strata: a tiered, coherent cache. This file loads the parts that run without Rails;
# the Rails adapter lives in active_support/cache/strata_store and is loaded by Rails
# when a config names :strata_store.
module Strata
  # Active Record models opt in with include Strata::Model; loaded on first use, so Strata runs
  # without Active Record.
  autoload :Model, "strata/model"
  # The cache of records' JSON strings for JSON APIs; loaded on first use.
  autoload :Representation, "strata/representation"
  # Rack middleware and test helpers that report Ruby VM cache invalidations; loaded on first
  # use, so Strata runs without Rack.
  autoload :VMWatch, "strata/vm_watch"
  # The live page (a Rack app) and its sampler; loaded on first use.
  autoload :Dashboard, "strata/dashboard"

  class << self
    # When true, every invalidate.strata event also carries the caller's location (:caller), to
    # find which code invalidates what. Off by default: taking the location costs a backtrace.
    attr_accessor :trace_invalidations
  end
  self.trace_invalidations = false
end

require "strata/version"
require "strata/errors"
require "strata/tier"
require "strata/tiers/shared_memory"
require "strata/tiers/memcached"

# In a Rails app: the invalidation log and `bin/rails strata:stats` (Strata::Railtie).
require "strata/railtie" if defined?(Rails::Railtie)
