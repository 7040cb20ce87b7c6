# frozen_string_literal: true

require "bundler"

module Strata
  module Bench
    # bin/bench --demo: the demo app's bench (demo/bench.rb), in a process of its own under the
    # demo's bundle (Puma, Rails' parts), after script/setup has installed it. memcached comes
    # from STRATA_MEMCACHED, as for the rest of bin/bench; --quick runs one round.
    module DemoBench
      ROOT = File.expand_path("..", __dir__)

      module_function

      # The exit status of demo/bench.rb (1 when script/setup failed).
      def run(quick:, out:, err:)
        # Bundler's original environment lacks a server bin/bench started (Servers): pass it on.
        memcached = ENV["STRATA_MEMCACHED"]
        Bundler.with_original_env do
          setup = [File.join(ROOT, "script", "setup"), "gemfiles/activesupport_7_2.gemfile", "demo/Gemfile"]
          unless system(*setup, chdir: ROOT, out: err)
            err.puts "bin/bench --demo: script/setup failed"
            return 1
          end

          env = {"BUNDLE_GEMFILE" => File.join(ROOT, "demo", "Gemfile"), "STRATA_MEMCACHED" => memcached}
          command = ["bundle", "exec", "ruby", "bench.rb", *(quick ? ["--rounds", "1"] : [])]
          out.flush
          system(env, *command, chdir: File.join(ROOT, "demo")) ? 0 : 1
        end
      end
    end
  end
end
