# frozen_string_literal: true

require "test_helper"
require "strata/stack"
require "support/waiting"

# Tag versions over two real shared-memory tables: :top (the host tier) above :bottom (the
# authority), as L1 above memcached or SQL.
class DependenciesTest < Minitest::Test
  include Strata::Waiting

  Dependencies = Strata::Dependencies

  def run
    Strata::TestSupport.with_tmpdir do |dir|
      @top = Strata::Tiers::SharedMemory.new(path: File.join(dir, "top"), size: 1 << 20, lock_timeout: 0.01)
      @bottom = Strata::Tiers::SharedMemory.new(path: File.join(dir, "bottom"), size: 1 << 20, lock_timeout: 0.01)
      # The bottom table plays a tier below the host: not the host tier itself.
      @bottom.define_singleton_method(:capabilities) { Strata::Tier::CAPABILITIES }
      @errors = []
      @dependencies = Dependencies.new(Strata::TierList.new({top: @top, bottom: @bottom},
        on_error: ->(error, tier) { @errors << [error.class, tier] }), coherence_interval: 30)
      super
    ensure
      @top&.close
      @bottom&.close
    end
  end

  def id
    @id ||= Dependencies.tag_id("bugs/42")
  end

  def key
    @dependencies.version_key(id)
  end

  # Entry bytes stamped with words (tag_id, version, ...).
  def entry(*words)
    Strata::Entry.encode("value", stamps: words.each_slice(2).to_a)
  end

  def test_a_missing_version_is_created_bottom_up_and_read_back_the_same
    version = @dependencies.versions([id]).first

    assert_equal [version].pack("Q<"), @bottom.get(key)
    assert_equal [version].pack("Q<"), @top.get(key)
    assert_equal [version], @dependencies.versions([id])
    assert_operator version, :<, 1 << 62
  end

  def test_the_authoritys_version_wins_over_a_fresh_one
    @bottom.set(key, [1234].pack("Q<"))

    assert_equal [1234], @dependencies.versions([id])
    assert_equal [1234].pack("Q<"), @top.get(key), "copied up"
  end

  def test_a_bump_gives_a_new_version_in_every_tier
    before = @dependencies.versions([id]).first

    assert @dependencies.bump([id])

    after = @dependencies.versions([id]).first
    refute_equal before, after
    assert_equal [after].pack("Q<"), @bottom.get(key)
    assert_equal [after].pack("Q<"), @top.get(key)
    assert @dependencies.current?(entry(id, after))
    refute @dependencies.current?(entry(id, before))
  end

  def test_a_check_does_not_create_a_missing_version
    refute @dependencies.current?(entry(id, 5))
    assert_nil @top.get(key)
    assert_nil @bottom.get(key)
  end

  def test_a_tier_that_fails_a_bump_drops_its_copy_and_one_that_cannot_is_false
    old = @dependencies.versions([id]).first
    failure = Strata::TierError.new("down", tier: :top)
    @top.define_singleton_method(:set) { |*, **| raise failure }

    assert @dependencies.bump([id])
    assert_nil @top.get(key), "the old copy is gone"
    refute @dependencies.current?(entry(id, old))

    @top.define_singleton_method(:delete) { |*| raise failure }
    @top.singleton_class.send(:remove_method, :set)
    @top.set(key, [old].pack("Q<"))
    @top.define_singleton_method(:set) { |*, **| raise failure }

    refute @dependencies.bump([id])
    assert_includes @errors, [Strata::TierError, :top]
  end

  def test_a_version_no_tier_can_store_is_fresh_and_matches_nothing_old
    failure = Strata::TierError.new("down", tier: :bottom)
    [@top, @bottom].each do |tier|
      tier.define_singleton_method(:add) { |*, **| raise failure }
      tier.define_singleton_method(:get_multi) { |*| raise failure }
    end

    first = @dependencies.versions([id]).first
    second = @dependencies.versions([id]).first

    refute_equal first, second
  end

  def test_malformed_version_bytes_are_dropped_and_replaced
    @top.set(key, "garbage")
    @bottom.set(key, [77].pack("Q<"))

    assert_equal [77], @dependencies.versions([id])
    assert_equal [77].pack("Q<"), @top.get(key)
    assert_includes @errors, [Strata::CorruptError, :top]
  end

  # The host table checks an entry's stamps in one call: no tier is read otherwise.
  def test_the_host_table_settles_a_check_alone
    ids = %w[bugs/42 projects/7 users/1 teams/3].map { |tag| Dependencies.tag_id(tag) }
    versions = @dependencies.versions(ids)
    failure = Strata::TierError.new("not to be read", tier: :bottom)
    @top.define_singleton_method(:get_multi) { |*| raise failure }
    @top.define_singleton_method(:get) { |*| raise failure }
    @bottom.define_singleton_method(:get_multi) { |*| raise failure }

    assert @dependencies.current?(entry(ids.first, versions.first))
    assert @dependencies.current?(entry(*ids.zip(versions).flatten))
    versions[2] += 1

    refute @dependencies.current?(entry(*ids.zip(versions).flatten))
    assert_empty @errors
  end

  def test_a_version_the_host_table_lacks_is_read_below_and_copied_up
    ids = [id, Dependencies.tag_id("projects/7")]
    versions = @dependencies.versions(ids)
    @top.delete(key)

    assert @dependencies.current?(entry(*ids.zip(versions).flatten))
    assert_equal [versions.first].pack("Q<"), @top.get(key)
    @top.delete(key)
    versions[0] += 1

    refute @dependencies.current?(entry(*ids.zip(versions).flatten))
  end

  def test_malformed_version_bytes_in_the_host_table_are_reported_and_read_below
    version = @dependencies.versions([id]).first
    @top.set(key, [version].pack("Q<").byteslice(0, 7))

    assert @dependencies.current?(entry(id, version))
    assert_includes @errors, [Strata::CorruptError, :top]
    assert_equal [version].pack("Q<"), @top.get(key), "replaced by the authority's"
  end

  def test_a_host_table_that_fails_its_check_is_read_again_and_reported
    version = @dependencies.versions([id]).first
    failure = Strata::TierError.new("down", tier: :top)
    @top.define_singleton_method(:check_stamps) { |*| raise failure }
    @top.define_singleton_method(:get) { |*| raise failure }
    @top.define_singleton_method(:get_multi) { |*| raise failure }

    assert @dependencies.current?(entry(id, version))
    refute @dependencies.current?(entry(id, version + 1))
    assert_includes @errors, [Strata::TierError, :top]
  end

  # Without a host table on top (memcached, SQL) the tiers' versions are read as they are.
  def test_a_stack_without_a_host_table_on_top_checks_through_reads
    dependencies = Dependencies.new(Strata::TierList.new({bottom: @bottom}))
    ids = [id, Dependencies.tag_id("projects/7")]
    versions = dependencies.versions(ids)

    assert dependencies.current?(entry(ids.first, versions.first))
    assert dependencies.current?(entry(*ids.zip(versions).flatten))
    refute dependencies.current?(entry(ids.first, versions.first + 1))
    refute dependencies.current?(entry(*ids.zip([versions.first, versions.last + 1]).flatten))
  end

  def test_a_malformed_entry_raises_corrupt
    assert_raises(Strata::CorruptError) { @dependencies.current?("\xE1".b) }
  end

  def test_bump_local_sets_or_drops_the_host_copy_only
    @dependencies.versions([id])

    assert @dependencies.bump_local(id, 99)
    assert_equal [99].pack("Q<"), @top.get(key)
    refute_equal [99].pack("Q<"), @bottom.get(key)

    assert @dependencies.bump_local(id)
    assert_nil @top.get(key)
    refute_nil @bottom.get(key)
  end

  # The poller's seam: copies above the authority go unless they equal its version.
  def test_drop_copies_drops_the_copies_that_differ_from_the_authority
    @bottom.set(key, [5].pack("Q<"))
    @top.set(key, [5].pack("Q<"))
    assert @dependencies.drop_copies(id)
    assert_equal [5].pack("Q<"), @top.get(key), "equal to the authority's: no older than the change"

    @top.set(key, [4].pack("Q<"))
    assert @dependencies.drop_copies(id)
    assert_nil @top.get(key)
    assert_equal [5].pack("Q<"), @bottom.get(key), "the authority is never touched"

    @top.set(key, [4].pack("Q<"))
    @bottom.delete(key)
    assert @dependencies.drop_copies(id)
    assert_nil @top.get(key), "no authority to compare with: dropped"
  end

  def test_the_host_copy_of_a_version_lives_coherence_interval_when_tiers_are_below
    dependencies = Dependencies.new(Strata::TierList.new({top: @top, bottom: @bottom}), coherence_interval: 0.05)
    dependencies.versions([id])
    @bottom.set(key, [5].pack("Q<")) # another host's bump, which this host's L1 did not see

    assert wait_until(2) { dependencies.versions([id]) == [5] }
  end

  # A bump that could neither set nor drop a middle tier's copy (memcached above SQL) leaves the
  # old version there: it lapses after coherence_interval, and the authority's is read again.
  def test_a_middle_tiers_copy_of_a_version_lapses_too
    Strata::TestSupport.with_tmpdir do |dir|
      middle = Strata::Tiers::SharedMemory.new(path: File.join(dir, "middle"), size: 1 << 20, lock_timeout: 0.01)
      middle.define_singleton_method(:capabilities) { Strata::Tier::CAPABILITIES }
      # Long enough that the copy is still there when read back below on a loaded machine.
      dependencies = Dependencies.new(Strata::TierList.new({top: @top, middle: middle, bottom: @bottom}), coherence_interval: 0.5)
      old = dependencies.versions([id]).first
      @bottom.set(key, [5].pack("Q<")) # the bump reached the authority only

      assert_equal [old].pack("Q<"), middle.get(key)
      assert wait_until(5) { dependencies.versions([id]) == [5] }
    ensure
      middle&.close
    end
  end

  def test_tag_ids_are_stable_62_bit_values
    assert_equal Dependencies.tag_id("bugs/42"), Dependencies.tag_id(+"bugs/42")
    refute_equal Dependencies.tag_id("bugs/42"), Dependencies.tag_id("bugs/43")
    assert_operator Dependencies.tag_id("bugs/42"), :<, 1 << 62
    assert_equal 0, key.getbyte(0)
  end

  def test_coherence_interval_must_be_positive
    assert_raises(ArgumentError) { Dependencies.new(Strata::TierList.new({top: @top}), coherence_interval: 0) }
    assert_raises(ArgumentError) { Dependencies.new(Strata::TierList.new({top: @top}), coherence_interval: "1") }
  end
end
