# frozen_string_literal: true

module Strata
  module Bench
    # The value bytes every store is given. Seeded, so every run and every store sees the same bytes.
    #
    # They are random, hence incompressible: Rails stores keep their default `compress: true`, so for
    # values of 1 KiB and more they try deflate on write and keep the raw bytes when it does not pay.
    # That is the cost an app pays for such payloads; text would instead measure Zlib's ratio.
    module Values
      SEED = 9_001

      @cache = {}

      def self.bytes(size)
        @cache[size] ||= Random.new(SEED + size).bytes(size).freeze
      end
    end
  end
end
