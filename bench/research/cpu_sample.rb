# frozen_string_literal: true

module Strata
  module Bench
    # One cell of the client CPU pass: a store ran `ops` calls of a case, using cpu_s seconds of
    # this process's CPU time over wall_s seconds. error is set (and the figures nil) when it failed.
    CpuSample = Struct.new(:store, :case_name, :ops, :cpu_s, :wall_s, :error, keyword_init: true) do
      def ok?
        error.nil?
      end

      def cpu_us_per_op
        ok? ? cpu_s * 1e6 / ops : nil
      end

      def wall_us_per_op
        ok? ? wall_s * 1e6 / ops : nil
      end
    end
  end
end
