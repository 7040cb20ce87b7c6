# frozen_string_literal: true

require "test_helper"
require "support/child_processes"

# Model-based fuzz of the shared-memory table (ext/strata/table.h): random operations run on
# the table and on a Ruby Hash, and every answer is compared. Each test prints its seed; SEED=n
# replays a run (minitest takes the same variable for its test order).
class SharedMemoryFuzzTest < Minitest::Test
  MIB = 1024 * 1024

  # Raised by Fuzzer when the table and the model disagree.
  class Mismatch < StandardError; end

  # Runs random operations on a table and on a Hash model and compares every answer.
  #
  # exact: true means nothing may be evicted (the caller sizes the table so), so the table must agree
  # with the model on every answer. exact: false lets the table lose entries but never return a wrong
  # value: a miss drops the key from the model, since from then on the table must behave as if the
  # key had been deleted.
  #
  # Value keys hold random bytes; counter keys hold only ASCII decimals, so incr and decr never meet
  # a non-numeric value. TTLs are nil or long enough never to expire during a run.
  class Fuzzer
    TTLS = [nil, nil, 0, 3600, 86_400].freeze
    HISTORY = 25 # operations quoted in a mismatch message

    # Weights of each operation, out of their sum.
    OPS = {
      get: 18, get_multi: 5, set: 24, set_too_large: 1, add: 8, delete: 8, get_with_cas: 7, cas: 7,
      incr: 8, decr: 4, set_counter: 3, full_check: 1
    }.freeze

    attr_reader :model

    # clear_every: the mean number of steps between clears; nil never clears (clear touches every
    # process's keys).
    def initialize(table, seed, prefix:, exact:, clear_every: nil, value_keys: 48, counter_keys: 8, max_value: 64 * 1024)
      @table = table
      @rng = Random.new(seed)
      @seed = seed
      @exact = exact
      @max_value = [max_value, table.max_value_size - 256].min # max_value_size counts key bytes too
      @model = {}             # key (binary) => value (binary)
      @version = Hash.new(0)  # key => writes so far; a cas token is good only for the version it was read at
      @tokens = []            # [key, version, token] as get_with_cas returned them
      @history = []
      @clear_rate = clear_every ? 1.0 / clear_every : 0.0
      @op_table = OPS.flat_map { |op, weight| [op] * weight }
      @value_keys = Array.new(value_keys) { |i| make_key(prefix, "v", i) }
      @counter_keys = Array.new(counter_keys) { |i| make_key(prefix, "c", i) }
    end

    def run(steps)
      steps.times { step }
      full_check
    end

    def all_keys
      @value_keys + @counter_keys
    end

    private

    # Keys of 1 to about 200 bytes; some carry multibyte UTF-8, compared as bytes.
    def make_key(prefix, kind, index)
      tail = case @rng.rand(4)
      when 0 then ""
      when 1 then "-" + "x" * @rng.rand(1..150)
      when 2 then "-ключ-#{@rng.rand(1000)}"
      else "-" + Array.new(@rng.rand(1..40)) { ("a".."z").to_a.sample(random: @rng) }.join
      end
      "#{prefix}#{kind}#{index}#{tail}".b
    end

    # Empty, tiny, small, medium and large values of random bytes.
    def make_value
      size = case @rng.rand(100)
      when 0...5 then 0
      when 5...35 then @rng.rand(1..16)
      when 35...65 then @rng.rand(17..256)
      when 65...92 then @rng.rand(257..4096)
      else @rng.rand(4097..[@max_value, 4097].max)
      end
      @rng.bytes([size, @max_value].min)
    end

    def ttl
      TTLS.sample(random: @rng)
    end

    def step
      return op_clear if @rng.rand < @clear_rate
      send(:"op_#{@op_table.sample(random: @rng)}")
    end

    def note(text)
      @history << text
      @history.shift if @history.size > HISTORY
    end

    def check(condition)
      return if condition
      raise Mismatch, "#{yield} (fuzz seed #{@seed}, exact: #{@exact})\nlast operations:\n  #{@history.join("\n  ")}"
    end

    def short(bytes)
      return bytes.inspect if bytes.nil? || bytes.is_a?(Integer)
      (bytes.bytesize > 24) ? "#{bytes.byteslice(0, 24).inspect}..(#{bytes.bytesize}B)" : bytes.inspect
    end

    def bump(key)
      @version[key] += 1
    end

    # The table dropped key (allowed only when not exact): the model forgets it too.
    def forget(key, why)
      check(!@exact) { "#{short(key)}: #{why}, but nothing may be evicted in this run" }
      @model.delete(key)
    end

    # Compares one read with the model.
    def compare_read(key, got, via)
      if got.nil?
        forget(key, "#{via} missed, model has #{short(@model[key])}") if @model.key?(key)
      else
        check(@model.key?(key)) { "#{via} #{short(key)} returned #{short(got)}, model has no such key" }
        check(got.b == @model[key]) { "#{via} #{short(key)} returned #{short(got)}, model has #{short(@model[key])}" }
        check(got.encoding == Encoding::BINARY) { "#{via} returned a #{got.encoding} string, not binary" }
      end
    end

    def op_get
      key = all_keys.sample(random: @rng)
      got = @table.get(key)
      note("get #{short(key)} -> #{short(got)}")
      compare_read(key, got, "get")
    end

    def op_get_multi
      keys = all_keys.sample(@rng.rand(0..12), random: @rng)
      got = @table.get_multi(keys)
      note("get_multi #{keys.size} keys -> #{got.size} hits")
      check(got.is_a?(Hash)) { "get_multi returned #{got.class}" }
      check((got.keys - keys).empty?) { "get_multi returned keys not asked for: #{(got.keys - keys).map { |k| short(k) }}" }
      keys.each { |key| compare_read(key, got[key], "get_multi") }
    end

    def op_set
      set_stored(@value_keys.sample(random: @rng), make_value)
    end

    # A set always stores (the table evicts to make room): the model takes the value.
    def set_stored(key, value)
      result = @table.set(key, value, ttl: ttl)
      note("set #{short(key)} #{short(value)} -> #{result.inspect}")
      check(result == true) { "set #{short(key)} returned #{result.inspect}" }
      @model[key] = value
      bump(key)
    end

    # A value one byte over max_value_size raises and writes nothing: the old value stays.
    def op_set_too_large
      key = @value_keys.sample(random: @rng)
      value = "z".b * (@table.max_value_size + 1)
      raised = begin
        @table.set(key, value)
        false
      rescue Strata::ValueTooLargeError
        true
      end
      note("set #{short(key)} #{value.bytesize}B (too large) -> raised: #{raised}")
      check(raised) { "set of #{value.bytesize} bytes (max_value_size #{@table.max_value_size}) did not raise" }
    end

    def op_add
      key = @value_keys.sample(random: @rng)
      value = make_value
      result = @table.add(key, value, ttl: ttl)
      note("add #{short(key)} #{short(value)} -> #{result.inspect}")
      if result
        forget(key, "add succeeded over #{short(@model[key])}") if @model.key?(key)
        @model[key] = value
        bump(key)
      else
        check(result == false) { "add returned #{result.inspect}" }
        check(@model.key?(key)) { "add #{short(key)} failed but the model has no such key" }
      end
    end

    def op_delete
      key = all_keys.sample(random: @rng)
      result = @table.delete(key)
      note("delete #{short(key)} -> #{result.inspect}")
      if result
        check(result == true) { "delete returned #{result.inspect}" }
        check(@model.key?(key)) { "delete #{short(key)} returned true but the model has no such key" }
      else
        check(result == false) { "delete returned #{result.inspect}" }
        forget(key, "delete returned false, model has #{short(@model[key])}") if @model.key?(key)
      end
      @model.delete(key)
      bump(key)
    end

    def op_get_with_cas
      key = @value_keys.sample(random: @rng)
      got = @table.get_with_cas(key)
      note("get_with_cas #{short(key)} -> #{got ? [short(got[0]), got[1]].inspect : "nil"}")
      if got
        check(got.is_a?(Array) && got.size == 2) { "get_with_cas returned #{got.inspect}" }
        compare_read(key, got[0], "get_with_cas")
        @tokens << [key, @version[key], got[1]]
        @tokens.shift if @tokens.size > 64
      else
        compare_read(key, nil, "get_with_cas")
      end
    end

    # Uses the newest token or any remembered one (often stale) and, sometimes, on another key.
    def op_cas
      return op_get_with_cas if @tokens.empty?
      token_key, token_version, token = @rng.rand(2).zero? ? @tokens.last : @tokens.sample(random: @rng)
      key = (@rng.rand(4).zero? ? @value_keys.sample(random: @rng) : token_key)
      value = make_value
      result = @table.cas(key, value, token, ttl: ttl)
      current = key == token_key && token_version == @version[key] && @model.key?(key)
      note("cas #{short(key)} #{short(value)} token #{token.inspect} (read for #{short(token_key)} v#{token_version}, now v#{@version[key]}) -> #{result.inspect}")
      if result
        check(result == true) { "cas returned #{result.inspect}" }
        check(current) { "cas #{short(key)} succeeded with a token that is stale or belongs to another key" }
        @model[key] = value
        bump(key)
      else
        check(result == false) { "cas returned #{result.inspect}" }
        forget(key, "cas with the current token failed") if current
      end
    end

    def op_set_counter
      set_stored(@counter_keys.sample(random: @rng), @rng.rand(0..10**9).to_s.b)
    end

    def op_incr
      counter(:incr) { |current, amount| current + amount }
    end

    def op_decr
      counter(:decr) { |current, amount| [current - amount, 0].max }
    end

    # An absent key with initial: stores initial and returns it (memcached's autovivify).
    def counter(op)
      key = @counter_keys.sample(random: @rng)
      amount = @rng.rand(0..1000)
      initial = @rng.rand(2).zero? ? nil : @rng.rand(0..10**6)
      result = @table.public_send(op, key, amount, ttl: ttl, initial: initial)
      note("#{op} #{short(key)} #{amount} initial: #{initial.inspect} -> #{result.inspect}")
      present = @model.key?(key)
      expected = present ? yield(@model[key].to_i, amount) : initial
      if result == expected
        @model[key] = result.to_s.b unless result.nil?
      elsif result.nil? && initial.nil?
        forget(key, "#{op} found no key")
      elsif result == initial && present
        forget(key, "#{op} autovivified over #{short(@model[key])}")
        @model[key] = result.to_s.b
      else
        check(false) { "#{op} #{short(key)} #{amount} initial: #{initial.inspect} returned #{result.inspect}, expected #{expected.inspect}" }
      end
      check(result.nil? || result.is_a?(Integer)) { "#{op} returned a #{result.class}" }
      bump(key) unless result.nil?
    end

    def op_clear
      @table.clear
      note("clear")
      @model.clear
      all_keys.each { |key| bump(key) }
    end

    # The whole table against the whole model: keys, a multi-get of every key, and entries.
    def op_full_check
      full_check
    end

    def full_check
      note("full check")
      listed = @table.keys.map(&:b) & all_keys
      got = @table.get_multi(all_keys)
      all_keys.each { |key| compare_read(key, got[key], "get_multi (full)") }
      if @exact
        check(listed.sort == @model.keys.sort) { "keys lists #{listed.size} of our keys, model has #{@model.size}" }
      else
        check((listed - @model.keys).empty?) { "keys lists #{(listed - @model.keys).size} keys the model has not got" }
      end
    end
  end

  def seed
    @seed ||= Integer(ENV.fetch("SEED") { Minitest.seed || Random.new_seed })
  end

  def announce
    puts "\n[fuzz] #{name}: seed=#{seed} (SEED=#{seed} replays)"
  end

  def table_path(dir)
    File.join(dir, "fuzz.strata")
  end

  # Big enough that nothing is evicted: every value ever written fits, garbage included.
  def test_single_process_agrees_exactly_with_the_model
    announce
    Strata::TestSupport.with_tmpdir do |dir|
      table = Strata::Tiers::SharedMemory.new(path: table_path(dir), size: 64 * MIB)
      fuzzer = Fuzzer.new(table, seed, prefix: "f:", exact: true, clear_every: 400)
      fuzzer.run(12_000)
      stats = table.stats
      assert_equal 0, stats[:evictions], "the table was sized so that nothing is evicted"
      assert_equal 0, stats[:torn_reads], "with no concurrent writer no read can be torn"
      assert_equal fuzzer.model.size, stats[:entries]
      assert_equal fuzzer.model.keys.sort, table.keys.map(&:b).sort
      table.close
    end
  rescue Mismatch => e
    flunk e.message
  end

  # A small table evicts all the time: misses are allowed, a wrong value never is.
  def test_small_table_never_returns_a_wrong_value
    announce
    Strata::TestSupport.with_tmpdir do |dir|
      table = Strata::Tiers::SharedMemory.new(path: table_path(dir), size: 1 * MIB)
      fuzzer = Fuzzer.new(table, seed + 1, prefix: "s:", exact: false, clear_every: 2500, value_keys: 200, max_value: 128 * 1024)
      fuzzer.run(12_000)
      assert_operator table.stats[:evictions], :>, 0, "the run was meant to evict"
      table.close
    end
  rescue Mismatch => e
    flunk e.message
  end

  # An index of a few buckets: new keys keep taking the slots of old ones (table.h: a full bucket
  # evicts its oldest item). Misses galore, still never a wrong value.
  def test_tiny_index_never_returns_a_wrong_value
    announce
    Strata::TestSupport.with_tmpdir do |dir|
      table = Strata::Tiers::SharedMemory.new(path: table_path(dir), size: 1 * MIB, slots: 64)
      fuzzer = Fuzzer.new(table, seed + 2, prefix: "t:", exact: false, clear_every: 2500, value_keys: 100, max_value: 2048)
      fuzzer.run(8000)
      assert_operator table.stats[:evictions], :>, 0, "the run was meant to evict"
      table.close
    end
  rescue Mismatch => e
    flunk e.message
  end

  # Forked processes, each on its own keys with its own model; no clear, which would touch the others'.
  def test_processes_on_disjoint_keys_each_agree_with_their_model
    announce
    Strata::TestSupport.with_tmpdir do |dir|
      path = table_path(dir)
      table = Strata::Tiers::SharedMemory.new(path: path, size: 64 * MIB, lock_timeout: 5)
      results = run_children(3, dir) do |i|
        child_table = (i == 0) ? table : Strata::Tiers::SharedMemory.new(path: path, size: 64 * MIB, lock_timeout: 5)
        Fuzzer.new(child_table, seed + 100 + i, prefix: "p#{i}:", exact: true, max_value: 16 * 1024).run(6000)
        "ok"
      end
      results.each_with_index { |(status, output), i| assert status.success?, "child #{i}: #{output}" }
      assert_equal 0, table.stats[:evictions] if table.stats.key?(:evictions)
      table.close
    end
  end

  # N processes each add 1 M times to one key: the key ends at N * M, and every incr returned a
  # distinct value (each saw its own step).
  def test_incr_from_many_processes_is_atomic
    processes = 4
    increments = 2000
    Strata::TestSupport.with_tmpdir do |dir|
      path = table_path(dir)
      table = Strata::Tiers::SharedMemory.new(path: path, size: 8 * MIB, lock_timeout: 5)
      assert table.set("shared-counter", "0")
      results = run_children(processes, dir) do |i|
        child_table = i.even? ? table : Strata::Tiers::SharedMemory.new(path: path, size: 8 * MIB, lock_timeout: 5)
        seen = Array.new(increments) { child_table.incr("shared-counter") }
        bad = seen.reject { |value| value.is_a?(Integer) }
        raise "incr returned #{bad.first(3).inspect}" unless bad.empty?
        raise "values seen by one process not increasing" unless seen.each_cons(2).all? { |a, b| a < b }
        seen.join(",")
      end
      results.each_with_index { |(status, _), i| assert status.success?, "child #{i}: #{results[i][1]}" }
      assert_equal((processes * increments).to_s, table.get("shared-counter"))
      all = results.flat_map { |_, output| output.split(",").map(&:to_i) }
      assert_equal((1..processes * increments).to_a, all.sort, "every incr returned a distinct step")
      table.close
    end
  end

  private

  # Forks count children running the block with their index; each writes its result (or its error) to
  # a file. Reaps every child against one deadline each, SIGKILLing any left. Returns
  # [[status, output], ...].
  def run_children(count, dir, timeout: 40)
    pids = Array.new(count) do |i|
      fork do
        out = File.join(dir, "child-#{i}.out")
        code = begin
          File.binwrite(out, yield(i).to_s)
          0
        rescue Exception => e # rubocop:disable Lint/RescueException -- a child must never run the parent's at_exit hooks
          File.binwrite(out, "#{e.class}: #{e.message}\n#{e.backtrace&.first(5)&.join("\n")}")
          1
        end
        exit!(code)
      end
    end
    statuses = pids.map { |pid| Strata::TestSupport::ChildProcesses.reap(pid, timeout) }
    flunk "children still running after #{timeout}s (hang)" if statuses.include?(nil)
    statuses.each_with_index.map do |status, i|
      out = File.join(dir, "child-#{i}.out")
      [status, File.exist?(out) ? File.binread(out) : "(no output)"]
    end
  ensure
    pids&.each { |pid| Strata::TestSupport::ChildProcesses.kill_and_reap(pid, 5) }
  end
end
