# frozen_string_literal: true

require "optparse"

module Strata
  module CLI
    # The command line of `strata stats`, parsed into plain values. Bad usage raises
    # OptionParser::ParseError (Stats prints it with the usage and exits 2).
    class Options
      USAGE = "Usage: strata stats [--json] [--watch [--count N] [--interval SECONDS]] [--config FILE | PATH]"

      attr_reader :json, :watch, :count, :interval, :config, :path

      def initialize(argv)
        @json = false
        @watch = false
        @count = nil
        @interval = nil
        @config = nil
        rest = parser.parse(argv)
        raise OptionParser::InvalidArgument, "give --config FILE or PATH, not both" if @config && rest.any?
        raise OptionParser::NeedlessArgument, rest.drop(1).join(" ") if rest.size > 1
        raise OptionParser::MissingArgument, "--config FILE or PATH" unless @config || rest.first

        @path = rest.first
      end

      private

      def parser
        @parser ||= OptionParser.new do |o|
          o.banner = USAGE
          o.on("--json", "print one JSON object (per refresh with --watch)") { @json = true }
          o.on("--watch", "refresh once a second until interrupted") { @watch = true }
          o.on("--count N", Integer, "with --watch: stop after N refreshes") do |n|
            raise OptionParser::InvalidArgument, "--count must be positive" unless n.positive?

            @count = n
          end
          o.on("--interval SECONDS", Float, "with --watch: seconds between refreshes (default 1)") do |s|
            raise OptionParser::InvalidArgument, "--interval must be >= 0" if s.negative?

            @interval = s
          end
          o.on("--config FILE", "a .rb or .yml file giving the store's tier options (l1:, memcached:, sql:)") { |f| @config = f }
        end
      end
    end
  end
end
