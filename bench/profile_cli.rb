# frozen_string_literal: true

require "optparse"
require_relative "cases"
require_relative "environment"
require_relative "profiler"
require_relative "stores"

module Strata
  module Bench
    # bin/profile CASE STORE: option parsing around Profiler.
    class ProfileCLI
      def initialize(argv, out: $stdout, err: $stderr)
        @argv = argv
        @out = out
        @err = err
      end

      def run
        options = parse
        return 0 unless options

        case_name, store_name = @argv
        Environment.open do |env|
          shown = Profiler::DEFAULTS.merge(options)
          @err.puts "profiling #{case_name} on #{store_name} (#{shown[:mode]}, #{shown[:seconds]} s)"
          paths = Profiler.new(env, case_name: case_name, store_name: store_name, io: @out, **options).run
          @err.puts "wrote #{paths.join(", ")}"
          @err.puts "flame graph: stackprof-flamegraph.pl #{paths[1]} > flame.svg, or open #{paths[2]}"
        end
        0
      rescue OptionParser::ParseError, Profiler::Unavailable => e
        @err.puts "bin/profile: #{e.message}"
        2
      end

      private

      def parse
        options = {}
        parser = OptionParser.new do |o|
          o.banner = "Usage: bin/profile CASE STORE [options]\n" \
            "  CASE:  #{Cases.names.join(", ")}\n  STORE: #{Stores.names.join(", ")}"
          o.on("--out DIR", "where to write the files (default #{Profiler::DEFAULTS[:out]})") { |d| options[:out] = d }
          o.on("--mode MODE", Profiler::MODES, "cpu (default), wall or object") { |m| options[:mode] = m }
          o.on("--seconds N", Float, "how long to sample (default #{Profiler::DEFAULTS[:seconds]})") do |s|
            options[:seconds] = s
          end
          o.on("--interval N", Integer, "sample period: microseconds, or allocations in object mode") do |i|
            options[:interval] = i
          end
          o.on("-h", "--help", "this text") do
            @out.puts o
            return nil
          end
        end
        parser.parse!(@argv)
        check(parser)
        options
      end

      def check(parser)
        case_name, store_name = @argv
        problem = if @argv.size != 2 then "expected CASE STORE, got #{@argv.inspect}"
        elsif !Cases.names.include?(case_name) then "unknown case #{case_name.inspect}"
        elsif !Stores.names.include?(store_name) then "unknown store #{store_name.inspect}"
        end
        raise OptionParser::InvalidArgument, "#{problem}\n#{parser}" if problem
      end
    end
  end
end
