# frozen_string_literal: true

require "open3"
require "rbconfig"
require "timeout"

module Strata
  module TestSupport
    # Rails apps for the tests of the generators and the Railtie, run in child Rubies so that Rails
    # stays out of the test process. Children inherit the bundle (BUNDLE_GEMFILE, RUBYOPT's
    # bundler/setup), whose gemspec entry puts this checkout's lib on their load path, as
    # Bundler does in an app; RAILS_ENV and RACK_ENV are theirs to set.
    module RailsApp
      ROOT = File.expand_path("../..", __dir__)
      # Seconds a child may take: a boot takes one or two.
      TIMEOUT = 120
      # What `rails new` needs to write an app offline, with only the frameworks in the bundle.
      NEW_APP_FLAGS = %w[--skip-bundle --skip-git --minimal --skip-asset-pipeline --skip-javascript --quiet].freeze

      Result = Struct.new(:out, :err, :status) do
        def success?
          status.success?
        end

        def to_s
          "exit #{status.exitstatus}\n--- stdout\n#{out}\n--- stderr\n#{err}"
        end
      end

      module_function

      # Runs command (ruby's arguments) in dir with env added; a Result. A child still running
      # after TIMEOUT seconds is killed with its process group, and the test fails.
      def ruby(dir, *command, env: {})
        env = {"RAILS_ENV" => nil, "RACK_ENV" => nil}.merge(env)
        Open3.popen3(env, RbConfig.ruby, *command, chdir: dir, pgroup: true) do |stdin, stdout, stderr, wait|
          stdin.close
          out = Thread.new { stdout.read }
          err = Thread.new { stderr.read }
          unless wait.join(TIMEOUT)
            Process.kill(:KILL, -wait.pid)
            raise Timeout::Error, "#{command.inspect} in #{dir} ran over #{TIMEOUT}s"
          end
          Result.new(out.value, err.value, wait.value)
        end
      end

      # A new Rails app, name, made by `rails new` in parent (railties' own templates, so the
      # environment files are the ones a user's app starts with). Its path.
      def new_app(parent, name)
        result = ruby(parent, "-e", 'require "rails/command"; Rails::Command.invoke(:application, ["new", *ARGV])',
          name, *NEW_APP_FLAGS)
        raise "rails new failed: #{result}" unless result.success?

        File.join(parent, name)
      end

      # A tiny app in dir, written by hand: config/application.rb loads the gem as Bundler.require
      # does (strata-cache.rb, which loads the Railtie once Rails is), then the lines of config
      # (Ruby, inside the Application class); config/environment.rb and a Rakefile as Rails
      # writes them. Its module is TinyApp.
      def tiny_app(dir, config)
        FileUtils.mkdir_p(File.join(dir, "config"))
        File.write(File.join(dir, "config/application.rb"), <<~RUBY)
          # frozen_string_literal: true

          require "rails"
          require "strata-cache"

          module TinyApp
            class Application < Rails::Application
              config.load_defaults Rails::VERSION::STRING.to_f
              config.eager_load = false
              config.logger = ActiveSupport::Logger.new(File.expand_path("../log/app.log", __dir__))
              config.log_level = :debug
              config.secret_key_base = "tiny"
          #{config.gsub(/^/, "    ")}
            end
          end
        RUBY
        File.write(File.join(dir, "config/environment.rb"), <<~RUBY)
          # frozen_string_literal: true

          require_relative "application"
          Rails.application.initialize!
        RUBY
        File.write(File.join(dir, "Rakefile"), <<~RUBY)
          # frozen_string_literal: true

          require_relative "config/application"
          Rails.application.load_tasks
        RUBY
        FileUtils.mkdir_p(File.join(dir, "log"))
        dir
      end
    end
  end
end
