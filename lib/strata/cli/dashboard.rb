# frozen_string_literal: true

require "optparse"
require "strata/cli/config"
require "strata/dashboard"
require "strata/dashboard/server"

module Strata
  module CLI
    # `strata dashboard`: the live page (Strata::Dashboard) served standalone on a port of this
    # host, for the tiers named as `strata stats` names them. It requires a token (--token, or
    # the STRATA_DASHBOARD_TOKEN environment variable, which unlike an argument no other user
    # can read in the process list) and listens on 127.0.0.1 unless told otherwise.
    class Dashboard
      USAGE = "Usage: strata dashboard --port N [--bind ADDRESS] [--token TOKEN] [--config FILE | PATH]"
      TOKEN_VARIABLE = "STRATA_DASHBOARD_TOKEN"

      # Exit status: 0 after an interrupt, 1 for a config or token that can't be used, 2 for bad
      # usage. ready: called with the Server once it listens (for tests and the message).
      def self.run(argv, env: ENV, out: $stdout, err: $stderr, ready: nil)
        options = parse(argv, env)
        config = options[:config] ? Config.from_file(options[:config]) : Config.from_path(options[:path])
        app = Strata::Dashboard.new(config: config, token: options[:token], vm_watch: nil)
        server = Strata::Dashboard::Server.new(app, bind: options[:bind], port: options[:port], log: err)
        out.puts("strata dashboard: http://#{options[:bind]}:#{server.port}/ (token required)")
        out.flush
        %w[INT TERM].each { |signal| trap(signal) { Thread.new { server.stop } } }
        ready&.call(server)
        server.run
        0
      rescue OptionParser::ParseError => e
        err.puts("strata dashboard: #{e.message}", USAGE)
        2
      rescue StandardError, ScriptError => e # a config file that fails to load, a bad token, a port in use
        err.puts("strata dashboard: #{e.class}: #{e.message}")
        1
      end

      def self.parse(argv, env)
        options = {bind: "127.0.0.1", token: env[TOKEN_VARIABLE]}
        rest = OptionParser.new do |o|
          o.banner = USAGE
          o.on("--port N", Integer, "the port to listen on (0: any free one)") { |n| options[:port] = n }
          o.on("--bind ADDRESS", "the address to listen on (default 127.0.0.1)") { |a| options[:bind] = a }
          o.on("--token TOKEN", "the secret every request must carry (or #{TOKEN_VARIABLE})") { |t| options[:token] = t }
          o.on("--config FILE", "a .rb or .yml file giving the store's tier options") { |f| options[:config] = f }
        end.parse(argv)
        raise OptionParser::MissingArgument, "--port" unless options[:port]
        raise OptionParser::MissingArgument, "--token (or #{TOKEN_VARIABLE})" if options[:token].to_s.empty?
        raise OptionParser::InvalidArgument, "give --config FILE or PATH, not both" if options[:config] && rest.any?
        raise OptionParser::NeedlessArgument, rest.drop(1).join(" ") if rest.size > 1
        raise OptionParser::MissingArgument, "--config FILE or PATH" unless options[:config] || rest.first

        options.merge(path: rest.first)
      end
    end
  end
end
