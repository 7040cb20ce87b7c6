# frozen_string_literal: true

require_relative "format"

module Strata
  module Bench
    # Loads Strata's own code on demand, so a checkout where it does not load (the extension not
    # compiled) skips the Strata stores with the reason instead of stopping the run.
    module StrataLoader
      @errors = {}

      # nil when feature loads, else a one-line reason.
      def self.load_error(feature)
        return @errors[feature] if @errors.key?(feature)

        @errors[feature] =
          begin
            require feature
            nil
          rescue ScriptError, StandardError => e
            "#{feature} does not load (#{Format.error(e)})"
          end
      end

      # nil when the block runs, else a one-line reason. For a smoke test of a store that loaded.
      def self.probe_error(what)
        yield
        nil
      rescue ScriptError, StandardError => e
        "#{what} failed (#{Format.error(e)})"
      end
    end
  end
end
