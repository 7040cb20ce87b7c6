# frozen_string_literal: true

require "logger"
require "stringio"

require_relative "model_case"

# Strata::Model: record tags, collection tags, invalidation after commit, declared cascades.
class StrataModelTest < Strata::ModelCase
  # Bugs whose project_id points at another bug: a cascade that can loop.
  class Node < Record
    self.table_name = "bugs"
    include Strata::Model

    belongs_to :parent, class_name: "StrataModelTest::Node", foreign_key: :project_id, optional: true
    strata_cascade :parent
  end

  def test_tags_are_table_slash_id_and_the_table
    bug = Bug.create!(title: "crash")

    assert_equal "bugs/#{bug.id}", bug.cache_tag
    assert_equal "bugs", Bug.cache_tag
    assert_equal "bugs/42", Bug.cache_tag_for(42)
  end

  def test_create_update_and_destroy_invalidate_the_record_and_the_collection
    bug = Bug.create!(title: "crash")
    other = Bug.create!(title: "hang")
    counted("bug", bug.cache_tag)
    counted("other", other.cache_tag)
    counted("index", Bug.cache_tag)

    bug.update!(title: "crash on start")
    assert_equal 2, counted("bug", bug.cache_tag), "the record's tag"
    assert_equal 2, counted("index", Bug.cache_tag), "the collection tag"
    assert_equal 1, counted("other", other.cache_tag), "another record's entry still hits"

    Bug.create!(title: "new")
    assert_equal 3, counted("index", Bug.cache_tag), "a create changes the collection"
    assert_equal 2, counted("bug", bug.cache_tag)

    bug.destroy!
    assert_equal 3, counted("bug", bug.cache_tag), "a destroy"
    assert_equal 4, counted("index", Bug.cache_tag)
    assert_equal 1, counted("other", other.cache_tag)
  end

  def test_touch_invalidates
    bug = Bug.create!(title: "crash")
    counted("bug", bug.cache_tag)

    bug.touch
    assert_nil Strata::TransactionTags.current
    assert_equal 2, counted("bug", bug.cache_tag)

    project = Project.create!(name: "p") # no timestamp: its touch writes nothing, and changes nothing
    counted("project", project.cache_tag)
    project.touch
    assert_nil Strata::TransactionTags.current, "nothing left pending"
    assert_equal 1, counted("project", project.cache_tag)
  end

  def test_a_primary_key_change_invalidates_the_old_and_the_new_tag
    bug = Bug.create!(title: "crash")
    old_tag = bug.cache_tag
    counted("old", old_tag)
    counted("new", "bugs/#{bug.id + 100}")

    bug.update!(id: bug.id + 100)
    assert_equal 2, counted("old", old_tag)
    assert_equal 2, counted("new", "bugs/#{bug.id}")
  end

  def test_a_save_that_changes_nothing_invalidates_nothing
    bug = Bug.create!(title: "crash")
    counted("bug", bug.cache_tag)

    bug.save!
    assert_equal 1, counted("bug", bug.cache_tag)
  end

  def test_a_cascade_invalidates_the_parent_without_touching_its_row
    bug = Bug.create!(title: "crash")
    counted("bug", bug.cache_tag)
    row = Bug.find(bug.id).attributes

    tag = BugTag.create!(bug: bug, name: "ui")
    assert_equal 2, counted("bug", bug.cache_tag), "adding a tag changes its bug"
    assert_equal row, Bug.find(bug.id).attributes, "the bugs row is untouched"

    tag.update!(name: "ux")
    assert_equal 3, counted("bug", bug.cache_tag)
    tag.destroy!
    assert_equal 4, counted("bug", bug.cache_tag)
  end

  def test_a_moved_child_invalidates_the_old_and_the_new_parent
    first = Bug.create!(title: "a")
    second = Bug.create!(title: "b")
    third = Bug.create!(title: "c")
    tag = BugTag.create!(bug: first, name: "ui")
    [first, second, third].each { |bug| counted(bug.cache_tag, bug.cache_tag) }

    tag.update!(bug: second)
    assert_equal 2, counted(first.cache_tag, first.cache_tag), "the old parent"
    assert_equal 2, counted(second.cache_tag, second.cache_tag), "the new parent"
    assert_equal 1, counted(third.cache_tag, third.cache_tag), "an unrelated bug"
  end

  def test_a_polymorphic_cascade_follows_the_type
    bug = Bug.create!(title: "crash")
    project = Project.create!(name: "p")
    attachment = Attachment.create!(owner: bug)
    counted("bug", bug.cache_tag)
    counted("project", project.cache_tag)

    attachment.update!(owner: project)
    assert_equal 2, counted("bug", bug.cache_tag), "the owner before"
    assert_equal 2, counted("project", project.cache_tag), "the owner after"
    attachment.destroy!
    assert_equal 3, counted("project", project.cache_tag)
    assert_equal 2, counted("bug", bug.cache_tag)
  end

  def test_cascades_are_transitive_and_end_on_loops
    project = Project.create!(name: "p")
    bug = Bug.create!(title: "crash", project: project)
    counted("project", project.cache_tag)
    counted("projects", Project.cache_tag)

    BugTag.create!(bug: bug, name: "ui")
    assert_equal 2, counted("project", project.cache_tag), "tag -> bug -> project"
    assert_equal 2, counted("projects", Project.cache_tag)

    node = Node.create!(title: "self")
    node.update!(project_id: node.id) # its own parent: a loop
    counted("node", node.cache_tag)
    node.update!(title: "again")
    assert_equal 2, counted("node", node.cache_tag)
  end

  def test_a_cascade_to_a_model_without_the_module_uses_its_table
    comment = Comment.create!(body: "hi")
    counted("comment", "comments/#{comment.id}")

    Note.create!(comment: comment)
    assert_equal 2, counted("comment", "comments/#{comment.id}")
  end

  def test_nested_fetches_depend_on_the_record_through_capture
    bug = Bug.create!(title: "crash")
    page = -> { store.fetch("page") { "#{store.fetch("bug/json", tags: bug.cache_tag) { bug.reload.title }}!" } }
    assert_equal "crash!", page.call

    BugTag.create!(bug: bug, name: "ui")
    assert_nil store.read("page"), "the page was built from the bug's entry"
  end

  def test_a_store_without_invalidate_tags_is_refused
    memory = ActiveSupport::Cache::MemoryStore.new

    error = assert_raises(ArgumentError) { Strata::Model.cache_store = memory }
    assert_match(/Strata::Model.cache_store: ActiveSupport::Cache::MemoryStore can't invalidate tags/, error.message)
    error = assert_raises(ArgumentError) { Bug.strata_cache_store(memory) }
    assert_match(/Bug.strata_cache_store: .*invalidate_tags/, error.message)
  end

  # Development's :memory_store and test's :null_store keep no tags: through Rails.cache, model
  # changes then invalidate nothing, and say so once, rather than fail every save.
  def test_through_a_rails_cache_without_tags_changes_invalidate_nothing_and_warn_once
    Strata::Model.cache_store = nil
    null = ActiveSupport::Cache::NullStore.new
    log = StringIO.new
    with_rails_cache(null, Logger.new(log)) do
      Bug.create!(title: "a")
      Bug.create!(title: "b").update!(title: "c")
      assert_equal 1, log.string.scan("keeps no tags").size, log.string
      assert_equal %w[a c], Bug.order(:id).pluck(:title), "every save committed"
    end
  ensure
    Strata::Model.cache_store = store
  end

  def test_a_model_can_use_its_own_store
    own = build_store(l1: {path: File.join(@tmpdir, "own.strata")})
    model = Class.new(Bug) { strata_cache_store own }
    bug = model.create!(title: "crash")
    own.fetch("bug", tags: bug.cache_tag) { 1 }
    store.fetch("bug", tags: bug.cache_tag) { 1 }

    bug.update!(title: "x")
    assert_nil own.read("bug"), "invalidated through the model's store"
    assert_equal 1, store.read("bug"), "not through the global one"
  end

  def test_a_cascade_on_something_not_a_belongs_to_is_an_error_at_the_first_change
    model = Class.new(Record) do
      self.table_name = "bugs"
      include Strata::Model

      strata_cascade :nothing
    end
    model.define_singleton_method(:name) { "Broken" }

    error = assert_raises(ArgumentError) { model.create!(title: "x") }
    assert_match(/Broken: strata_cascade :nothing names no belongs_to association/, error.message)
    assert_equal 0, Bug.count, "the save rolled back"
    assert_raises(ArgumentError) { Bug.strata_cascade }
  end

  private

  # Runs the block with Rails.cache answering store and Rails.logger logger (a Rails module of
  # the test's own when none is loaded; Strata::Model looks them up at each change).
  def with_rails_cache(store, logger)
    made = !defined?(::Rails)
    Object.const_set(:Rails, Module.new) if made
    rails = ::Rails
    originals = %i[cache logger].to_h { |name| [name, rails.respond_to?(name) ? rails.method(name) : nil] }
    rails.define_singleton_method(:cache) { store }
    rails.define_singleton_method(:logger) { logger }
    yield
  ensure
    if made
      Object.send(:remove_const, :Rails)
    else
      originals.each do |name, original|
        original ? rails.define_singleton_method(name, original) : rails.singleton_class.send(:remove_method, name)
      end
    end
  end
end
