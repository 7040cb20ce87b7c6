# frozen_string_literal: true

module Strata
  module Bench
    # One cell of the benchmark matrix, minus the store: an operation, a value size and, for fetch,
    # the share of calls that hit.
    #
    # op: :fetch      fetch with a block; a miss runs the block and writes its value.
    #     :read_multi one read_multi of `batch` keys that are all present.
    #     :write      overwrite keys that already exist.
    # keys: the working set, a power of two; nil for the default of the value size (Workload::POOL).
    Case = Struct.new(:name, :op, :value_size, :hit_ratio, :batch, :keys, keyword_init: true) do
      # The hit percentage the workload is built to produce, or nil when hits do not apply.
      def expected_hit_pct
        hit_ratio && hit_ratio * 100.0
      end

      def describe
        what = {fetch: "fetch with a block", read_multi: "read_multi of #{batch} keys", write: "write"}.fetch(op)
        hits = hit_ratio ? ", #{expected_hit_pct.round}% hits" : ""
        set = keys ? ", #{keys} keys (#{(keys * value_size) >> 20} MiB)" : ""
        "#{what}, #{value_size} B values#{hits}#{set}"
      end
    end

    # The matrix (docs/benchmarks.md): Viscacha's cases plus ours. Order is the table's row order.
    module Cases
      SMALL = 30
      LARGE = 25 * 1024
      # A 25 KiB working set several times the L1 tier's per-process value memo (8 MiB), so that
      # its hits read the table rather than the memo; 50 MiB, within every store's size here.
      LARGE_SET = 2048

      ALL = [
        Case.new(name: "miss_30b", op: :fetch, value_size: SMALL, hit_ratio: 0.0),
        Case.new(name: "hit_30b", op: :fetch, value_size: SMALL, hit_ratio: 1.0),
        Case.new(name: "half_30b", op: :fetch, value_size: SMALL, hit_ratio: 0.5),
        Case.new(name: "miss_25kb", op: :fetch, value_size: LARGE, hit_ratio: 0.0),
        Case.new(name: "hit_25kb", op: :fetch, value_size: LARGE, hit_ratio: 1.0),
        Case.new(name: "half_25kb", op: :fetch, value_size: LARGE, hit_ratio: 0.5),
        Case.new(name: "get_multi_100", op: :read_multi, value_size: SMALL, hit_ratio: 1.0, batch: 100),
        Case.new(name: "set_30b", op: :write, value_size: SMALL),
        Case.new(name: "set_25kb", op: :write, value_size: LARGE),
        Case.new(name: "hit_25kb_50mb", op: :fetch, value_size: LARGE, hit_ratio: 1.0, keys: LARGE_SET),
        Case.new(name: "set_25kb_50mb", op: :write, value_size: LARGE, keys: LARGE_SET)
      ].freeze

      def self.names
        ALL.map(&:name)
      end

      def self.find(name)
        ALL.find { |kase| kase.name == name } or
          raise ArgumentError, "unknown case #{name.inspect} (cases: #{names.join(", ")})"
      end
    end
  end
end
