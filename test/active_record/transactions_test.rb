# frozen_string_literal: true

require_relative "model_case"

# Strata::Model inside transactions (Strata::TransactionTags): fetches that depend on what an open
# transaction changed bypass the cache in that thread only; the commit invalidates; a rollback
# (P7) invalidates nothing.
class StrataTransactionsTest < Strata::ModelCase
  def test_inside_the_transaction_dependent_fetches_bypass_and_after_commit_they_miss
    bug = Bug.create!(title: "old")
    assert_equal "old", store.fetch("bug", tags: bug.cache_tag) { bug.title }
    store.fetch("page") { "#{store.fetch("bug", tags: bug.cache_tag) { bug.title }}!" }
    assert_equal 1, counted("other", "projects/1")

    Bug.transaction do
      bug.update!(title: "new")
      assert_equal "new", store.fetch("bug", tags: bug.cache_tag) { bug.title }, "the block's value"
      assert_nil store.read("bug"), "an entry stamped with a changed tag is a miss"
      refute store.exist?("bug")
      assert_nil store.read("page"), "and one stamped through capture"
      assert_equal "new!", store.fetch("page") { "#{store.fetch("bug", tags: bug.cache_tag) { bug.title }}!" }
      assert_equal({}, store.read_multi("bug", "page"))
      assert_equal 1, counted("other", "projects/1"), "entries on other tags still hit"
      assert_equal "computed", store.fetch("fresh", tags: bug.cache_tag) { "computed" }
    end
    assert_nil Strata::TransactionTags.current, "nothing pending after the commit"

    assert_nil store.read("bug"), "the commit invalidated the tag"
    assert_nil store.read("page")
    assert_nil store.read("fresh"), "nothing was written inside the transaction"
    assert_equal "new", store.fetch("bug", tags: bug.cache_tag) { bug.title }
    assert_equal "new", store.read("bug"), "cached again after the commit"
  end

  # A soft invalidation inside a transaction waits for the commit, and stays soft: the entry is
  # answered stale after it, not missing.
  def test_a_soft_invalidation_inside_the_transaction_is_soft_after_the_commit
    bug = Bug.create!(title: "old")
    assert_equal "old", store.fetch("bug", tags: bug.cache_tag) { bug.title }

    Bug.transaction do
      assert store.invalidate_tags(bug.cache_tag, soft: true, stale_for: 30)
      assert_nil store.read("bug"), "hidden in this thread until the commit"
    end
    assert_nil Strata::TransactionTags.current
    assert_equal "old", store.read("bug"), "stale, not missing"
    assert_equal "new", store.fetch("bug", tags: bug.cache_tag) { "new" }, "the caller that takes the claim recomputes"
  end

  # The fetch's own tags are not the changed ones: the entry's stamps still are.
  def test_inside_the_transaction_a_fetch_tagged_otherwise_misses_an_entry_stamped_with_a_changed_tag
    bug = Bug.create!(title: "old")
    store.fetch("bug", tags: bug.cache_tag) { bug.title }

    Bug.transaction do
      bug.update!(title: "new")
      assert_equal "new", store.fetch("bug", tags: "projects/1") { bug.title }
    end
  end

  def test_inside_the_transaction_entries_without_the_changed_tags_are_served
    bug = Bug.create!(title: "old")
    store.write("plain", "untagged")
    store.write("keyed", "other tags", tags: "projects/1")

    Bug.transaction do
      bug.update!(title: "new")
      assert_equal "untagged", store.read("plain")
      assert_equal "other tags", store.fetch("keyed") { "computed" }, "a fetch without the changed tags reads its key"
      assert_equal "computed", store.fetch("keyed", tags: bug.cache_tag) { "computed" },
        "a fetch tagged with a changed tag does not read its key, whatever is there"
      assert_equal({"keyed" => "computed"}, store.fetch_multi("keyed", tags: bug.cache_tag) { "computed" })
    end
    assert_equal "other tags", store.read("keyed"), "and writes nothing"
  end

  def test_p7_a_rollback_invalidates_nothing
    bug = Bug.create!(title: "old")
    tag = BugTag.create!(bug: bug, name: "ui")
    store.fetch("bug", tags: bug.cache_tag) { "old" }
    store.fetch("index", tags: Bug.cache_tag) { "index" }
    store.fetch("tag", tags: tag.cache_tag) { "tag" }
    dependencies = store.stack.dependencies
    ids = [bug.cache_tag, Bug.cache_tag, tag.cache_tag, BugTag.cache_tag].map { |name| Strata::Dependencies.tag_id(name) }
    versions = dependencies.versions(ids)

    Bug.transaction do
      bug.update!(title: "new")
      tag.update!(name: "ux")
      BugTag.create!(bug: bug, name: "new")
      assert_nil store.read("bug"), "bypassed inside"
      store.fetch("bug", tags: bug.cache_tag) { "new" }
      raise ActiveRecord::Rollback
    end

    assert_nil Strata::TransactionTags.current, "the rollback ended the bypass"
    assert_equal versions, dependencies.versions(ids), "no version changed"
    assert_equal "old", store.read("bug"), "entries still hit"
    assert_equal "index", store.read("index")
    assert_equal "tag", store.read("tag")
    assert_equal "old", Bug.find(bug.id).title
  end

  def test_p7_a_transaction_that_raises_invalidates_nothing
    bug = Bug.create!(title: "old")
    store.fetch("bug", tags: bug.cache_tag) { "old" }

    assert_raises(RuntimeError) do
      Bug.transaction do
        bug.update!(title: "new")
        raise "boom"
      end
    end
    assert_equal "old", store.read("bug")
    assert_nil Strata::TransactionTags.current
  end

  def test_a_rolled_back_savepoint_forgets_its_changes_and_keeps_the_outer_ones
    first = Bug.create!(title: "a")
    second = Bug.create!(title: "b")
    store.fetch("first", tags: first.cache_tag) { "a" }
    store.fetch("second", tags: second.cache_tag) { "b" }

    Bug.transaction do
      first.update!(title: "a2")
      Bug.transaction(requires_new: true) do
        second.update!(title: "b2")
        assert_nil store.read("second"), "bypassed inside the savepoint"
        raise ActiveRecord::Rollback
      end
      assert_equal "b", store.read("second"), "the savepoint's change is forgotten"
      assert_nil store.read("first"), "the outer one is still pending"
    end

    assert_nil store.read("first"), "the commit invalidated the outer change"
    assert_equal "b", store.read("second"), "and not the rolled back one"
  end

  def test_a_released_savepoint_commits_with_the_outer_transaction
    first = Bug.create!(title: "a")
    second = Bug.create!(title: "b")
    store.fetch("first", tags: first.cache_tag) { "a" }
    store.fetch("second", tags: second.cache_tag) { "b" }

    Bug.transaction do
      Bug.transaction(requires_new: true) { first.update!(title: "a2") }
      Bug.transaction(requires_new: true) do
        second.update!(title: "b2")
        raise ActiveRecord::Rollback
      end
      assert_nil store.read("first"), "the released savepoint's change is still pending"
    end

    assert_nil store.read("first"), "invalidated at the outer commit"
    assert_equal "b", store.read("second")
  end

  def test_a_nested_transaction_that_rolls_back_the_outer_one_invalidates_nothing
    bug = Bug.create!(title: "a")
    store.fetch("bug", tags: bug.cache_tag) { "a" }

    Bug.transaction do
      Bug.transaction(requires_new: true) { bug.update!(title: "a2") }
      raise ActiveRecord::Rollback
    end
    assert_equal "a", store.read("bug")
    assert_nil Strata::TransactionTags.current
  end

  def test_a_write_inside_the_transaction_deletes_its_key_and_caches_nothing
    bug = Bug.create!(title: "old")
    store.write("plain", "v1") # not stamped with the bug's tag
    store.write("listed", "v1")

    Bug.transaction do
      bug.update!(title: "new")
      refute store.write("plain", "v2", tags: bug.cache_tag), "not stored"
      store.write_multi({"listed" => "v2", "kept" => "k"}, tags: bug.cache_tag)
      assert_nil store.read("plain"), "the old value is gone: it doesn't carry the tag"
      assert_nil store.read("listed")
      assert_nil store.read("kept")
    end
    assert_nil store.read("plain")
    assert_nil store.read("listed")
  end

  # As in a Rails test that runs in a transaction (use_transactional_tests): the app's
  # transactions are savepoints whose commit runs after_commit.
  def test_inside_a_non_joinable_transaction_the_inner_commit_invalidates
    bug = Bug.create!(title: "old")
    store.fetch("bug", tags: bug.cache_tag) { "old" }

    Record.transaction(joinable: false) do
      Bug.transaction do
        bug.update!(title: "new")
        Bug.transaction(requires_new: true) { BugTag.create!(bug: bug, name: "ui") }
      end
      assert_nil Strata::TransactionTags.current, "the after_commit took every change"
      assert_nil store.read("bug"), "invalidated"
      assert_equal "new", store.fetch("bug", tags: bug.cache_tag) { "new" }
      assert_equal "new", store.read("bug"), "cached again: nothing pending"
      raise ActiveRecord::Rollback
    end
  end

  def test_fetch_multi_inside_the_transaction_bypasses
    bug = Bug.create!(title: "old")
    store.fetch_multi("a", "b", tags: bug.cache_tag) { |name| "#{name}1" }

    Bug.transaction do
      bug.update!(title: "new")
      assert_equal({"a" => "a2", "b" => "b2"}, store.fetch_multi("a", "b", tags: bug.cache_tag) { |name| "#{name}2" })
    end
    assert_equal({}, store.read_multi("a", "b"), "invalidated, and nothing was written inside")
  end

  def test_another_threads_open_transaction_does_not_bypass_this_threads_fetches
    bug = Bug.create!(title: "old")
    store.fetch("bug", tags: bug.cache_tag) { "old" }
    changed = Queue.new
    finish = Queue.new
    inside = Queue.new

    writer = Thread.new do
      Bug.connection_pool.with_connection do
        Bug.transaction do
          Bug.find(bug.id).update!(title: "new")
          inside << store.read("bug")
          changed << true
          finish.pop
        end
      end
    end
    changed.pop
    assert_nil inside.pop, "the writing thread bypasses"
    assert_equal "old", store.read("bug"), "this thread still hits: the change is not committed"
    assert_equal "old", store.fetch("bug", tags: bug.cache_tag) { "recomputed" }
    assert_nil Strata::TransactionTags.current, "nothing pending in this thread"

    finish << true
    writer.join
    assert_nil store.read("bug"), "the commit invalidated it for everyone"
  end

  def test_the_bypass_follows_the_fiber_when_connections_are_per_fiber
    bug = Bug.create!(title: "old")
    store.fetch("bug", tags: bug.cache_tag) { "old" }

    Bug.transaction do
      bug.update!(title: "new")
      assert_nil store.read("bug")
      assert_nil Fiber.new { store.read("bug") }.resume, "a fiber of the same thread shares its connection"
    end
  end
end
