# frozen_string_literal: true

# Strata: a tiered, coherent cache. This file loads the parts that run without Rails;
# the Rails adapter lives in active_support/cache/strata_store and is loaded by Rails
# when a config names :strata_store.
module Strata
end

require "strata/version"
require "strata/errors"
require "strata/tier"
require "strata/tiers/shared_memory"
require "strata/tiers/memcached"
