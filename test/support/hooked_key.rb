# frozen_string_literal: true

module Strata
  module TestSupport
    # A key whose eql? runs a hook, as a caller's String subclass may: a multi-key read that puts
    # keys into a Hash runs the caller's code between lookups.
    class HookedKey < String
      attr_accessor :on_eql

      def eql?(other)
        on_eql&.call
        super
      end
    end
  end
end
