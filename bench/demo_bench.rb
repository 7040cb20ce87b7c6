# frozen_string_literal: true

require "bundler"

module Strata
  module Bench
    # bin/bench --demo: the demo app's bench (demo/bench.rb), a Rails 8.1 app, on Ruby 3.3 in the
    # Debian 13 root (script/trixie, built on first use) under the demo's bundle, installed there
    # when missing. memcached comes from STRATA_MEMCACHED, as for the rest of bin/bench (the root
    # shares the host's loopback); --quick runs one round.
    module DemoBench
      ROOT = File.expand_path("..", __dir__)

      module_function

      # The exit status of demo/bench.rb (1 when the root or the bundle could not be made).
      def run(quick:, out:, err:)
        # Bundler's original environment lacks a server bin/bench started (Servers): pass it on.
        memcached = ENV["STRATA_MEMCACHED"]
        Bundler.with_original_env do
          env = {"BUNDLE_GEMFILE" => File.join(ROOT, "demo", "Gemfile"), "BUNDLE_VERSION" => "system",
                 "BUNDLE_PATH" => ENV.fetch("BUNDLE_PATH", File.join(ROOT, "vendor", "bundle")),
                 "STRATA_MEMCACHED" => memcached}
          bench = "cd demo && { bundle check >/dev/null 2>&1 || bundle install --quiet >&2; } && " \
            "exec bundle exec ruby bench.rb \"$@\""
          command = [File.join(ROOT, "script", "trixie"), "run", "sh", "-c", bench, "bench",
            *(quick ? ["--rounds", "1"] : [])]
          out.flush
          return 0 if system(env, *command, chdir: ROOT)

          err.puts "bin/bench --demo: demo/bench.rb failed in the Debian 13 root (script/trixie)"
          1
        end
      end
    end
  end
end
