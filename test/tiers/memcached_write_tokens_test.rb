# frozen_string_literal: true

require "test_helper"
require "securerandom"
require "strata/stack"
require "strata/tiers/memcached"
require "strata/tiers/shared_memory"

# Write tokens over memcached: a write answers the CAS its item got, and the stack's read-back of
# its own write (Copies#settle) compares that CAS instead of reading the value again. A server with
# E (newer ones: Debian 13's 1.6.38) takes a CAS the client chose; one without
# (Debian 12's 1.6.18) says its own after a single set, and a quiet set_multi then answers no
# token. bin/test runs these against both (its second pair of memcached instances is Debian 13's
# for the Ruby 3.3 lines), and each test checks the path its server takes.
class MemcachedWriteTokensTest < Minitest::Test
  Request = Strata::Meta::Request

  def setup
    @servers = Strata::TestSupport.memcached_servers
    @tier = Strata::Tiers::Memcached.new(servers: @servers, timeout: 2)
    @client = @tier.client
    @other = Strata::Meta::Client.new(servers: @servers, timeout: 2) # another process's writes
    @prefix = "tokens-#{SecureRandom.hex(6)}-"
  end

  def teardown
    @tier.close
    @other.close
  end

  def key(name)
    "#{@prefix}#{name}"
  end

  def explicit_cas?(key)
    @client.features(@client.ring.server_for(key)).explicit_cas
  end

  def test_a_set_with_a_token_answers_the_cas_its_item_got
    token = @tier.set(key("a"), "one", token: true)

    assert_kind_of Integer, token
    assert_equal token, @client.cas_of(key("a"))
    assert_equal ["one", token], @tier.get_with_cas(key("a"))
    assert @tier.holds?(key("a"), token)
    # Chosen by the client exactly where the server has E.
    assert_equal explicit_cas?(key("a")), Request::NEW_CAS_RANGE.cover?(token)
  end

  def test_another_write_or_a_delete_or_an_invalidation_changes_what_the_key_holds
    %w[set delete invalidate].each do |change|
      token = @tier.set(key(change), "mine", token: true)
      case change
      when "set" then @other.set(key(change), "mine")
      when "delete" then @other.delete(key(change))
      when "invalidate" then @other.invalidate(key(change), grace_ttl: 30)
      end

      refute @tier.holds?(key(change), token), "after another client's #{change}, even of the same bytes"
    end
    assert_nil @client.cas_of(key("absent"))
  end

  # memcached hands the refill of a stale item to the first mg that sees it, value or not: the
  # read-backs hand it on, so the next lease read still wins it.
  def test_reading_back_a_stale_item_leaves_its_refill_to_the_next_lease_read
    [[:holds?, key("one")], [:write_tokens, key("many")]].each do |read_back, name|
      token = @tier.set(name, "v", token: true)
      @other.invalidate(name, grace_ttl: 30)

      held = (read_back == :holds?) ? @tier.holds?(name, token) : @tier.write_tokens([name]).key?(name)
      refute held, "#{read_back}: a stale item is not the write"
      assert @other.lease_get(name, lease_ttl: 5).won, "#{read_back} kept the refill win"
    end
  end

  def test_set_multi_answers_tokens_where_the_server_has_e
    entries = (1..20).to_h { |i| [key("m#{i}"), "value #{i}"] }
    stored = @tier.set_multi(entries, tokens: true)

    assert_equal entries.keys.sort, stored.keys.sort
    entries.each_key do |name|
      if explicit_cas?(name)
        assert_kind_of Integer, stored[name], name
      else
        assert_equal true, stored[name], "a quiet ms does not say the server's CAS: #{name}"
      end
    end
    with_tokens = stored.select { |_name, token| token.is_a?(Integer) }
    assert_equal with_tokens, @tier.write_tokens(with_tokens.keys + [key("absent")])
    assert_equal entries.keys.sort, @tier.set_multi(entries).select { |_name, ok| ok == true }.keys.sort, "no tokens unless asked"
  end

  def test_a_write_over_memcached_is_read_back_by_its_token_not_its_value
    with_l1_over_memcached do |stack, l1|
      reads = record_reads(@tier)
      value = entry("x" * 20_000)
      assert stack.set(key("big"), value)
      assert_equal [[:holds?, key("big")]], reads, "the value is not read back"
      assert_equal value, l1.get(key("big"))

      reads.clear
      assert stack.set(key("small"), entry("s"))
      assert_equal [[:peek, key("small")]], reads, "under Stack::WRITE_TOKEN_MIN, the value comes back as fast"

      reads.clear
      entries = {key("b1") => entry("1" * 5000), key("b2") => entry("2" * 5000)}
      assert_equal({key("b1") => true, key("b2") => true}, stack.set_multi(entries))
      with_e, without = entries.keys.partition { |name| explicit_cas?(name) }
      expected = []
      expected << [:peek_multi, without] unless without.empty?
      expected << [:write_tokens, with_e] unless with_e.empty?
      assert_equal expected, reads
      entries.each { |name, bytes| assert_equal bytes, l1.get(name) }
    end
  end

  def test_a_write_replaced_below_before_its_read_back_leaves_no_copy_above
    # Read back by token and by value.
    [Strata::Stack::WRITE_TOKEN_MIN, 10].each do |size|
      with_l1_over_memcached do |stack, l1|
        mine = entry("m" * size)
        theirs = entry("theirs")
        # Another process's write lands in memcached between this one's and its read-back.
        after_write(@tier, :set) { |name| @other.set(name, theirs) }
        stack.set(key("raced#{size}"), mine)
        assert_nil l1.get(key("raced#{size}")), "the copy above would be older than memcached's"
        assert_equal theirs, stack.get(key("raced#{size}"))

        names = [key("r1-#{size}"), key("r2-#{size}")]
        after_write(@tier, :set_multi) { |written| written.each { |name| @other.set(name, theirs) } }
        stack.set_multi(names.to_h { |name| [name, mine] })
        names.each do |name|
          assert_nil l1.get(name), name
          assert_equal theirs, stack.get(name)
        end
      end
    end
  end

  private

  def entry(payload)
    Strata::Entry.encode(payload, flags: Strata::Entry::UTF8, expires_at: 0)
  end

  def with_l1_over_memcached
    Strata::TestSupport.with_tmpdir do |dir|
      l1 = Strata::Tiers::SharedMemory.new(path: File.join(dir, "l1"), size: 4 << 20)
      errors = []
      stack = Strata::Stack.new({l1: l1, l2: @tier}, on_error: ->(error, tier) { errors << [error, tier] })
      yield stack, l1
      assert_empty errors
    ensure
      l1&.close
    end
  end

  # The read-backs the stack makes of tier (peek, peek_multi, holds?, write_tokens), in order.
  def record_reads(tier)
    reads = []
    %i[peek holds?].each do |name|
      read = tier.method(name)
      tier.define_singleton_method(name) do |name_or_key, *rest|
        reads << [name, name_or_key]
        read.call(name_or_key, *rest)
      end
    end
    %i[peek_multi write_tokens].each do |name|
      read = tier.method(name)
      tier.define_singleton_method(name) do |keys|
        reads << [name, keys]
        read.call(keys)
      end
    end
    reads
  end

  # Runs the block with what tier's write (name) stored (a key, or the keys of a set_multi)
  # after each such write returns, once.
  def after_write(tier, name)
    write = tier.method(name)
    pending = true
    tier.define_singleton_method(name) do |arg, *rest, **options|
      result = write.call(arg, *rest, **options)
      if pending
        pending = false
        yield(arg.is_a?(Hash) ? arg.keys : arg)
      end
      result
    end
  end
end
