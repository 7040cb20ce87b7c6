# frozen_string_literal: true

require "strata/errors"
require "strata/vm_watch"

module Strata
  class VMWatch
    # For RSpec, without depending on it: RSpec.configure { |c| c.include Strata::VMWatch::RSpec }
    # and then, in an example,
    #
    #   expect_no_vm_cache_invalidation { cart.total }
    #
    # which raises Strata::VMCacheInvalidated (failing the example) if the block invalidated Ruby's VM caches.
    # debug: false leaves out the sites and the tracing cost.
    module RSpec
      def expect_no_vm_cache_invalidation(label = "the block", debug: true)
        session = Session.new(debug: debug).start
        begin
          result = yield
        ensure
          report = session.finish(label)
        end
        raise VMCacheInvalidated, report if report

        result
      end
    end
  end
end
