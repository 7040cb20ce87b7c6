# frozen_string_literal: true

require "strata/vm_watch"

module Strata
  class VMWatch
    # For Minitest::Test: include it in a test class and each test fails if its body (between
    # setup and teardown) invalidated Ruby's VM caches, with a message naming the lines.
    #
    #   require "strata/vm_watch/minitest"
    #   class CartTest < Minitest::Test
    #     include Strata::VMWatch::Minitest
    #   end
    #
    # The watch runs in debug mode (SiteTracer) unless the class overrides vm_watch_debug? to
    # return false; then the message has the counters only. A test that must warm something up
    # (load a class on first use) does it in setup. For a narrower check,
    # assert_no_vm_cache_invalidation { ... } watches one block.
    module Minitest
      def vm_watch_debug?
        true
      end

      def assert_no_vm_cache_invalidation(label = "the block")
        session = Session.new(debug: vm_watch_debug?).start
        begin
          yield
        ensure
          report = session.finish(label)
        end
        assert report.nil?, -> { report.message }
      end

      def after_setup
        super
        @strata_vm_watch = Session.new(debug: vm_watch_debug?).start
      end

      def before_teardown
        report = @strata_vm_watch&.finish { "#{self.class.name}##{name}" }
        @strata_vm_watch = nil
        super
        flunk(report.message) if report
      end
    end
  end
end
