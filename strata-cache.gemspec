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
  spec.required_ruby_version = ">= 3.1", "< 3.4" # bin/test: 3.1 (Debian 12) and 3.3 (Debian 13)

  spec.files = Dir["lib/**/*.{rb,tt}", "lib/strata/dashboard/assets/*", "exe/*", "ext/**/*.{c,h,rb}", "docs/*.md", "README.md", "CHANGELOG.md", "LICENSE"]
  spec.extensions = ["ext/strata/extconf.rb"]
  spec.require_paths = ["lib"]
  spec.bindir = "exe"
  spec.executables = ["strata"]

  # No homepage, source or changelog URI: the repository has no public address yet, and RubyGems
  # takes only URLs there. The changelog ships in the gem (CHANGELOG.md).
  spec.metadata["rubygems_mfa_required"] = "true"

  # Only what bin/test runs (gemfiles/, demo/): Active Support 7.1 and 7.2 on Ruby 3.1, 7.2, 8.0
  # and 8.1 on Ruby 3.3. The store reaches into the base store's internals, so a new Rails line is
  # declared once the suite passes on it.
  spec.add_dependency "activesupport", ">= 7.1", "< 8.2"
end
