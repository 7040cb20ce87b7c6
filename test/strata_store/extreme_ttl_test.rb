# frozen_string_literal: true

require_relative "store_case"
require "securerandom"

# Every expires_in a Rails app can pass, in each layout: one past 2038 (memcached's last unix
# time), an infinite one and one past any tier's clock are kept; NaN and a negative one are the
# caller's mistake and raise ArgumentError naming expires_in, as Rails does.
class StrataStoreExtremeTtlTest < Strata::StoreCase
  LAYOUTS = {
    l1: ->(test) { {} },
    l2: ->(test) { {l1: nil, memcached: test.memcached} },
    l1_l2: ->(test) { {memcached: test.memcached} },
    l1_l3: ->(test) { {sql: {path: File.join(test.tmpdir, "cache#{SecureRandom.hex(4)}.sqlite3")}} }
  }.freeze

  attr_reader :tmpdir

  def setup
    @namespace = "ttl#{SecureRandom.hex(6)}"
  end

  def memcached
    {servers: Strata::TestSupport.memcached_servers}
  end

  def test_ttls_past_2038_infinite_or_past_any_clock_are_kept
    [100.years, Float::INFINITY, 1e300].each_with_index do |ttl, round|
      each_layout(round) do |cache, layout|
        label = "#{layout} expires_in: #{ttl.inspect}"
        reports = capture_reports do
          assert cache.write("w", "v", expires_in: ttl), label
          assert_equal "v", cache.read("w"), label
          assert_equal "f", cache.fetch("f", expires_in: ttl) { "f" }, label
          assert_equal "f", cache.fetch("f", expires_in: ttl) { flunk "#{label}: fetch recomputed" }
          cache.write_multi({"m1" => 1, "m2" => 2}, expires_in: ttl)
          assert_equal({"m1" => 1, "m2" => 2}, cache.read_multi("m1", "m2"), label)
          assert_equal 4, cache.increment("n", 4, expires_in: ttl), label
          assert_equal 5, cache.increment("n", 1, expires_in: ttl), label
        end
        assert_empty reports.map { |report| report[:error] }, label
      end
    end
  end

  # The entry still expires when its expires_in ends, whatever the tiers were told.
  def test_an_entry_kept_past_2038_still_expires_at_its_time
    each_layout do |cache, layout|
      cache.write("w", "v", expires_in: 100.years)
      travel(101.years) { assert_nil cache.read("w"), layout }
    end
  end

  def test_nan_expires_in_raises_naming_it_and_writes_nothing
    each_layout do |cache, layout|
      calls = {
        write: -> { cache.write("w", "v", expires_in: Float::NAN) },
        fetch: -> { cache.fetch("f", expires_in: Float::NAN) { "f" } },
        write_multi: -> { cache.write_multi({"m" => 1}, expires_in: Float::NAN) },
        increment: -> { cache.increment("n", 1, expires_in: Float::NAN) },
        decrement: -> { cache.decrement("n", 1, expires_in: Float::NAN) }
      }
      calls.each do |name, call|
        error = assert_raises(ArgumentError, "#{layout} #{name}") { call.call }
        assert_match(/expires_in/, error.message)
      end
      assert_equal({}, cache.read_multi("w", "f", "m", "n"), layout)
    end
  end

  # Rails' own check (Store#merged_options) takes a negative expires_in given per call: raised
  # when raise_on_invalid_cache_expiration_time is set, else reported and dropped. One that is
  # the store's default reaches the tiers' TTLs, and raises there.
  def test_negative_expires_in_behaves_as_in_rails
    each_layout do |cache, layout|
      with_raise_on_invalid_expiration(true) do
        error = assert_raises(ArgumentError, layout.to_s) { cache.write("w", "v", expires_in: -1) }
        assert_match(/negative/, error.message)
      end
      reports = with_raise_on_invalid_expiration(false) do
        capture_reports { assert cache.write("w", "v", expires_in: -1), layout.to_s }
      end
      assert_match(/negative/, reports.first[:error].message)
      assert_equal "v", cache.read("w"), "#{layout}: written without the negative expiry, as Rails does"
    end

    cache = build_store(namespace: @namespace, expires_in: -5)
    error = assert_raises(ArgumentError) { cache.write("d", "v") }
    assert_match(/expires_in must be a number of seconds >= 0, got -5/, error.message)
    assert_raises(ArgumentError) { cache.increment("n") }
    assert_nil cache.read("d")
  end

  private

  # Yields a fresh store of each layout, each on a namespace (and table) of its own.
  def each_layout(round = 0)
    LAYOUTS.each do |layout, options|
      tiers = options.call(self)
      l1 = tiers.key?(:l1) ? tiers.delete(:l1) : {path: File.join(@tmpdir, "#{layout}#{round}.l1"), size: TABLE_SIZE}
      cache = ActiveSupport::Cache::StrataStore.new(namespace: "#{@namespace}#{layout}#{round}", **tiers, **(l1 ? {l1: l1} : {}))
      @stores << cache
      yield cache, layout
    end
  end

  def with_raise_on_invalid_expiration(value)
    before = ActiveSupport::Cache::Store.raise_on_invalid_cache_expiration_time
    ActiveSupport::Cache::Store.raise_on_invalid_cache_expiration_time = value
    yield
  ensure
    ActiveSupport::Cache::Store.raise_on_invalid_cache_expiration_time = before
  end
end
