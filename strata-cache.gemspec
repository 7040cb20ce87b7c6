# frozen_string_literal: true

require_relative "lib/strata/version"

Gem::Specification.new do |spec|
  spec.name = "strata-cache"
  spec.version = Strata::VERSION
  spec.authors = ["Strata contributors"]
  spec.summary = "A tiered, coherent ActiveSupport cache store: shared-memory L1, memcached L2, SQL L3."
  spec.description = "Strata is one ActiveSupport::Cache::Store over a host-wide shared-memory table " \
    "(a C extension), memcached and a durable SQL table."
  spec.license = "MIT"
  spec.required_ruby_version = ">= 3.1"

  spec.files = Dir["lib/**/*.{rb,tt}", "ext/**/*.{c,h,rb}", "README.md", "LICENSE"]
  spec.extensions = ["ext/strata/extconf.rb"]
  spec.require_paths = ["lib"]

  spec.add_dependency "activesupport", ">= 7.1", "< 9"
  spec.add_dependency "connection_pool", ">= 2.4", "< 3"
end
