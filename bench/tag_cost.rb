# frozen_string_literal: true

require "benchmark/ips"
require_relative "cases"
require_relative "format"
require_relative "paired_ratio"
require_relative "result"
require_relative "runner"
require_relative "stores"
require_relative "text_table"
require_relative "values"

module Strata
  module Bench
    # What dependency tags cost (docs/coherence.md), on the embedded default store in its two
    # layouts: strata_store as the matrix builds it (L1 + SQLite), and the same with L1 alone.
    # Two reports, TagHitCost and TagInvalidateCost; both run before the matrix when strata_store
    # is selected.
    module TagCost
      # Every tagged entry and fetch carries these; four, the count the hit-cost goal names.
      TAGS = %w[bench:tag:a bench:tag:b bench:tag:c bench:tag:d].freeze

      # strata_store with L1 alone: the hit path without a tier below to read tag versions from.
      class L1Only < Stores::StrataStore
        NAME = "strata_store_l1_only"

        def tiers(env)
          {l1: l1_tier(env)}
        end
      end

      # A layout whose entries are all written, and fetched, with TAGS: its hits are stamped
      # entries whose four stamps are checked against their tags' versions.
      module Tagged
        def fetch(key, &block)
          @store.fetch(key, tags: TAGS, &block)
        end

        def write(key, value)
          @store.write(key, value, tags: TAGS)
        end

        # Besides tier failures: proves the stamps are there and honoured (an entry written with
        # TAGS misses once one of them is invalidated), so the cell did not time untagged hits.
        def check
          super
          key = "bench:tagged:probe"
          @store.write(key, "stamped", tags: TAGS)
          @store.invalidate_tags(TAGS.last)
          raise "an entry written with tags: was still served after invalidate_tags" unless @store.read(key).nil?
        end
      end

      class TaggedStrataStore < Stores::StrataStore
        include Tagged

        NAME = "strata_store_tagged"
      end

      class TaggedL1Only < L1Only
        include Tagged

        NAME = "strata_store_l1_only_tagged"
      end

      # [label, untagged adapter, tagged adapter] per layout, in report order.
      LAYOUTS = [
        ["#{Stores::StrataStore::NAME} (L1 + SQLite)", Stores::StrataStore, TaggedStrataStore],
        ["#{Stores::StrataStore::NAME} (L1 only)", L1Only, TaggedL1Only]
      ].freeze

      # A quick run (bin/bench --quick) takes this many rounds and settles a cell this long at
      # most: each benchmark-ips round costs about a quarter second however short its time, and
      # the report is a smoke test there.
      QUICK_ROUNDS = 3
      QUICK_SETTLE = 0.1
      # The default run's rounds: each costs a quarter second or more per store, and bin/bench
      # stays under 5 minutes.
      ROUNDS = 4

      # Runs `count` alternating benchmark-ips rounds of each block (name => callable taking an
      # iteration count), every other round in reverse order as the Runner does, and returns
      # name => Result whose rounds pair up for PairedRatio.
      def self.alternate(blocks, warmup:, time:, count:)
        rounds = blocks.keys.to_h { |name| [name, []] }
        count.times do |round|
          Runner.round_order(blocks.keys, round).each do |name|
            GC.start
            report = Benchmark.ips(quiet: true) do |x|
              x.config(warmup: warmup / count, time: time / count)
              x.report(name) { |times| blocks[name].call(times) }
            end
            rounds[name] << report.entries.first.ips
          end
        end
        rounds.to_h do |name, ips|
          sorted = ips.sort
          median = sorted[sorted.size / 2]
          spread = (sorted.last - sorted.first) / 2.0 / median * 100
          [name, Result.new(store: name, case_name: "invalidate_tags", ips: median, error_pct: spread, rounds: ips)]
        end
      end
    end

    # An L1 hit through the Rails API with four tags against the same hit untagged: the matrix's
    # hit_30b case (fetch with a block, 30 B values, every call a hit) on each layout twice, once
    # as is and once with every entry written and fetched with TAGS. The two cells of a layout are
    # measured by the Runner in alternating rounds, and the cost is their PairedRatio (untagged
    # ips over tagged): how many times an untagged hit's time a tagged one takes. Goal: TARGET.
    class TagHitCost
      CASE = "hit_30b"
      TARGET = 1.2
      DEFAULTS = {seconds: Runner::FULL[:time], warmup: Runner::FULL[:warmup], settle: Runner::FULL[:settle]}.freeze

      # seconds, warmup, settle: per cell, as the Runner takes them; quick: fewer rounds, less settling.
      def initialize(env, quick: false, **options)
        @env = env
        @options = DEFAULTS.merge(options.slice(*DEFAULTS.keys))
        @options[:settle] = TagCost::QUICK_SETTLE if quick
        @rounds = quick ? TagCost::QUICK_ROUNDS : TagCost::ROUNDS
      end

      # A Hash for the JSON report (string keys); ::lines renders it.
      def run
        o = @options
        runner = Runner.new(@env, warmup: o[:warmup], time: o[:seconds], settle: o[:settle], rounds: @rounds,
          progress: nil)
        kase = Cases.find(CASE)
        layouts = TagCost::LAYOUTS.map do |label, untagged_class, tagged_class|
          untagged, tagged = runner.measure_case(kase, [untagged_class, tagged_class])
          layout(label, untagged, tagged)
        end
        {"case" => CASE, "tags" => TagCost::TAGS.size, "rounds" => @rounds, "target_max_ratio" => TARGET,
         "layouts" => layouts}
      end

      def self.lines(section)
        rows = section["layouts"].map do |l|
          next [l["layout"], "failed: #{l["error"]}", "", "", ""] if l["error"]

          [l["layout"], "#{Format.ips(l["untagged_ips"])} i/s", "#{Format.ips(l["tagged_ips"])} i/s",
            format("%.2fx", l["ratio"]), l["met"] ? "met" : "not met"]
        end
        ["tags: hit cost (#{section["case"]}, an L1 hit through fetch with a block; every entry and fetch " \
          "with #{section["tags"]} tags against none; goal at most #{section["target_max_ratio"]}x; " \
          "the median of the ratios of #{section["rounds"]} alternating rounds)",
          TextTable.render(["store", "untagged", "#{section["tags"]} tags", "tagged / untagged", "verdict"], rows)
            .gsub(/^/, "  ")]
      end

      private

      def layout(label, untagged, tagged)
        failed = [untagged, tagged].reject(&:ok?)
        return {"layout" => label, "error" => failed.map(&:error).join("; ")} unless failed.empty?

        missed = [untagged, tagged].find { |r| r.hit_pct && r.hit_pct < 100.0 }
        return {"layout" => label, "error" => "#{missed.store} hit #{Format.pct(missed.hit_pct)}, not 100%"} if missed

        ratio = PairedRatio.of(untagged, tagged)
        {"layout" => label, "untagged_ips" => untagged.ips.round(1), "tagged_ips" => tagged.ips.round(1),
         "untagged_error_pct" => untagged.error_pct.round(2), "tagged_error_pct" => tagged.error_pct.round(2),
         "ratio" => ratio.round(3), "ratio_of_medians" => (untagged.ips / tagged.ips).round(3), "met" => ratio <= TARGET}
      end
    end

    # invalidate_tags of one tag with FEW dependent entries against one with `dependents` (100,000;
    # fewer in a quick run), on each layout: one store holds both tags' entries (30 B values,
    # written with write_multi before timing), and the two calls are timed in alternating rounds.
    # A bump is one write of the tag's version per tier, whatever depends on it (O(1) per tag), so
    # the two should cost the same: their ratio, about 1x, is the figure. The entries stay in the
    # tables while the tag is bumped again and again; the bump never visits them either way.
    # Before timing, a sample of each tag's entries must be present; after, it must miss.
    # The table is strata_store's 64 MiB (StrataL1::TABLE_BYTES): 100,000 entries of a 30 B value,
    # a 30-odd byte key and one stamp take about 15 MiB of it, under a fifth of its index slots;
    # the L1-only layout's sample read proves none was evicted.
    class TagInvalidateCost
      FEW = 10
      SLICE = 1_000 # entries per write_multi while filling
      SAMPLE = 1_000 # entries of a tag read back before and after timing, at most
      DEFAULTS = {seconds: Runner::FULL[:time], warmup: Runner::FULL[:warmup], dependents: 100_000}.freeze
      QUICK_DEPENDENTS = 10_000 # filling 100,000 through the Rails API takes seconds per layout

      # seconds, warmup: per timed call, as the Runner takes them per cell; dependents: the many
      # tag's entries; quick: fewer of them and fewer rounds.
      def initialize(env, quick: false, **options)
        @env = env
        @options = DEFAULTS.merge(options.slice(*DEFAULTS.keys))
        @options[:dependents] = QUICK_DEPENDENTS if quick && !options.key?(:dependents)
        @rounds = quick ? TagCost::QUICK_ROUNDS : TagCost::ROUNDS
      end

      # A Hash for the JSON report (string keys); ::lines renders it.
      def run
        layouts = TagCost::LAYOUTS.map do |label, store_class, _tagged|
          measure(label, store_class)
        rescue => e
          {"layout" => label, "error" => Format.error(e)}
        end
        {"few" => FEW, "many" => @options[:dependents], "rounds" => @rounds, "unit" => "microseconds per call", "layouts" => layouts}
      end

      def self.lines(section)
        few, many = section["few"], section["many"]
        rows = section["layouts"].map do |l|
          next [l["layout"], "failed: #{l["error"]}", "", ""] if l["error"]

          [l["layout"], "#{Format.significant(l["few_us_per_call"])} µs", "#{Format.significant(l["many_us_per_call"])} µs",
            format("%.2fx", l["ratio"])]
        end
        ["tags: invalidate_tags cost (one tag, time per call with #{few} and with #{many} dependent entries; " \
          "O(1) per tag means a ratio near 1x; the median of the ratios of #{section["rounds"]} alternating rounds)",
          TextTable.render(["store", "#{few} entries", "#{many} entries", "#{many} / #{few}"], rows).gsub(/^/, "  ")]
      end

      private

      def measure(label, store_class)
        store = store_class.new(@env)
        cache = store.cache
        tags = {few: "bench:invalidate:few", many: "bench:invalidate:many"}
        keys = {few: fill(cache, tags[:few], FEW), many: fill(cache, tags[:many], @options[:dependents])}
        keys.each { |name, list| expect_present(cache, sample(list), tags[name]) }
        results = TagCost.alternate(tags.to_h { |name, tag| [name, invalidator(cache, tag)] },
          warmup: @options[:warmup], time: @options[:seconds], count: @rounds)
        keys.each { |name, list| expect_missing(cache, sample(list), tags[name]) }
        store.check
        few, many = results.values_at(:few, :many)
        ratio = PairedRatio.of(few, many)
        {"layout" => label, "few_us_per_call" => (1e6 / few.ips).round(3), "many_us_per_call" => (1e6 / many.ips).round(3),
         "few_error_pct" => few.error_pct.round(2), "many_error_pct" => many.error_pct.round(2),
         "ratio" => ratio.round(3), "ratio_of_medians" => (few.ips / many.ips).round(3)}
      ensure
        store&.close
      end

      # Writes count entries that depend on tag; returns their keys.
      def fill(cache, tag, count)
        value = Values.bytes(Cases::SMALL)
        keys = Array.new(count) { |i| "bench:dep:#{tag}:#{i}".freeze }
        keys.each_slice(SLICE) { |slice| cache.write_multi(slice.to_h { |key| [key, value] }, tags: [tag]) }
        keys
      end

      def invalidator(cache, tag)
        ->(times) { times.times { cache.invalidate_tags(tag) } }
      end

      def sample(keys)
        step = [keys.size / SAMPLE, 1].max
        (0...keys.size).step(step).map { |i| keys[i] }
      end

      def expect_present(cache, keys, tag)
        found = keys.count { |key| !cache.read(key).nil? }
        return if found == keys.size

        raise "only #{found} of #{keys.size} sampled entries of #{tag} were present before timing " \
          "(the L1 table too small?)"
      end

      def expect_missing(cache, keys, tag)
        found = keys.count { |key| !cache.read(key).nil? }
        raise "#{found} of #{keys.size} sampled entries of #{tag} were still served after invalidate_tags" if found.positive?
      end
    end
  end
end
