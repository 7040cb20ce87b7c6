# frozen_string_literal: true

# bin/bench sets Bundler up itself, so that it works the same directly and under `bundle exec`:
# the Active Support 7.2 gemfile and vendor/bundle unless the environment names others. On a
# fresh machine (gems or the extension missing) script/setup installs what is missing first, as
# bin/test does. Plain Ruby: it runs before Bundler.
module StrataBundleSetup
  ROOT = File.expand_path("..", __dir__)

  # command: the name failures are reported under.
  def self.setup(command)
    return if defined?(Bundler)

    ENV["BUNDLE_GEMFILE"] ||= File.join(ROOT, "gemfiles", "activesupport_7_2.gemfile")
    ENV["BUNDLE_PATH"] ||= File.join(ROOT, "vendor", "bundle")
    ready = system("bundle", "check", out: File::NULL, err: File::NULL) && File.exist?(File.join(ROOT, "lib/strata/strata_ext.so"))
    system(File.join(ROOT, "script", "setup"), ENV["BUNDLE_GEMFILE"]) || abort("#{command}: script/setup failed") unless ready
    require "bundler/setup"
  end
end
