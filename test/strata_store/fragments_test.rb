# frozen_string_literal: true

require_relative "store_case"
require "action_controller"
require "strata/model"
require "strata/tiers/sql"
require "support/postgres_cluster"

# View fragments (Strata::Fragments): Rails' `cache` helper over a StrataStore keeps the tag
# promise (issue 35, cause 2). Templates rendered by ActionController's renderer, no app; the
# store over L1 and the SQL tier in the app's database (an SQLite file here, PostgreSQL below).
class StrataStoreFragmentsTest < Strata::StoreCase
  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  class Post < Record
    self.table_name = "posts"
    include Strata::Model
  end

  class Controller < ActionController::Base
  end

  def setup
    connect
    record.connection_pool.with_connection { |c| c.create_table(:posts) { |t| t.string :title and t.timestamps } }
    Strata::Tiers::SQL.create_table!(record)
    Strata::Model.cache_store = store
    Controller.cache_store = store
    Controller.perform_caching = true
  end

  def teardown
    Strata::Model.cache_store = nil
    Controller.cache_store = nil
    disconnect
  end

  def connect
    record.establish_connection(adapter: "sqlite3", database: File.join(@tmpdir, "app.sqlite3"))
  end

  def disconnect
    record.remove_connection
  end

  def store
    @store ||= build_store(sql: {connection_class: record})
  end

  # This class's models: each test class has its own (Active Record caches statements per
  # model class, and the subclass below is on another database).
  def record
    self.class::Record
  end

  def post_class
    self.class::Post
  end

  def render(template, **locals)
    Controller.renderer.render(inline: template, locals: locals)
  end

  # Renders template with a body that, before it gives "new", renders template in another
  # thread, whose body must not run: [what this render gave, what the other one was given].
  def render_while_another_renders(template)
    meanwhile = nil
    rendered = render(template, body: lambda {
      meanwhile = Thread.new { render(template, body: -> { flunk "rendered twice" }) }.value
      "new"
    })
    [rendered, meanwhile]
  end

  # The statements on the posts table the block runs.
  def posts_queries
    count = 0
    counter = ->(*, payload) { count += 1 if payload[:sql].include?("posts") }
    ActiveSupport::Notifications.subscribed(counter, "sql.active_record") { yield }
    count
  end

  # A change committed while the fragment renders (after it read its data): the fragment was
  # built from data older than the change, so it is stamped with the versions from before, and
  # misses. Rails' helper alone wrote it with the versions read at its write, after the change.
  def test_a_change_during_the_rendering_makes_the_fragment_miss
    template = "<% cache 'sidebar', tags: ['posts/1'] do %><%= body.call %><% end %>"
    changed = lambda do
      store.invalidate_tags("posts/1") # committed after the rendering read "old"
      "old"
    end
    assert_equal "old", render(template, body: changed)
    assert_equal "new", render(template, body: -> { "new" }), "the fragment built before the change missed"
    assert_equal "new", render(template, body: -> { flunk "cached now" })
  end

  # A soft invalidation: the first render after it takes the fragment's claim and renders it
  # again; a render meanwhile (here in another thread, inside the first one's body) answers the
  # stale fragment; then the new one is cached.
  def test_a_soft_invalidation_renders_the_fragment_once_while_others_answer_it_stale
    template = "<% cache 'sidebar', tags: ['posts/1'] do %><%= body.call %><% end %>"
    assert_equal "old", render(template, body: -> { "old" })
    store.invalidate_tags("posts/1", soft: true)

    assert_equal ["new", "old"], render_while_another_renders(template)
    assert_equal "new", render(template, body: -> { flunk "cached now" })
  end

  # stale_while_revalidate: in the helper's options: within the window after the fragment
  # expired, the render that takes its claim renders it again while one meanwhile answers the
  # expired fragment.
  def test_stale_while_revalidate_renders_the_fragment_once_while_others_answer_it
    template = "<% cache 'sidebar', expires_in: 60, stale_while_revalidate: 60 do %><%= body.call %><% end %>"
    assert_equal "old", render(template, body: -> { "old" })

    travel 90.seconds do
      assert_equal ["new", "old"], render_while_another_renders(template)
      assert_equal "new", render(template, body: -> { flunk "cached now" })
    end
  end

  # fail_safe: in the helper's options: a render that raises once the fragment expired answers
  # the last good fragment, nothing of the failed render, one report; within the throttle
  # (fail_safe_throttle, 5 s) the next render answers it without running. Without a last good
  # one the error is raised.
  def test_fail_safe_answers_the_last_good_fragment_when_the_render_raises
    template = "[<% cache 'sidebar', expires_in: 60, fail_safe: 3600 do %>partial <%= body.call %><% end %>]"
    assert_equal "[partial good]", render(template, body: -> { "good" })

    travel 90.seconds do
      reports = capture_reports do
        assert_equal "[partial good]", render(template, body: -> { raise IOError, "the database is down" })
        assert_equal "[partial good]", render(template, body: -> { flunk "throttled" })
      end
      assert_equal [IOError], reports.map { |report| report[:error].class }
    end
    assert_raises(ActionView::Template::Error) { render("<% cache 'other', fail_safe: 3600 do %><%= raise IOError %><% end %>") }
  end

  # An outer fragment depends on the inner fragments rendered in it: invalidating what an inner
  # one shows misses the outer one too, whether the inner one was rendered or read.
  def test_an_inner_fragments_tags_reach_the_fragment_around_it
    template = "<% cache 'page' do %>[<% cache 'item', tags: ['posts/1'] do %><%= item.call %><% end %>]<% end %>"
    assert_equal "[v1]", render(template, item: -> { "v1" })
    store.invalidate_tags("posts/1")
    assert_equal "[v2]", render(template, item: -> { "v2" }), "the outer fragment missed with the inner one"
    assert_equal "[v2]", render(template, item: -> { flunk "cached" })

    other = "<% cache 'other-page' do %>(<% cache 'item', tags: ['posts/1'] do %><%= item.call %><% end %>)<% end %>"
    assert_equal "(v2)", render(other, item: -> { flunk "the inner fragment is a hit" })
    store.invalidate_tags("posts/1")
    assert_equal "(v3)", render(other, item: -> { "v3" }), "a fragment around an inner hit depends on it too"
  end

  # `cache post` and `tags: post`: a Strata::Model record tags the fragment with its record tag,
  # a relation with its model's collection tag.
  def test_records_and_relations_in_the_name_or_tags_tag_the_fragment
    post = post_class.create!(title: "first")
    keyed = "<% cache [post, 'title'] do %><%= body.call %><% end %>"
    assert_equal "first", render(keyed, post: post, body: -> { post.title })
    post_class.where(id: post.id).update_all(title: "second") # no callback, no new updated_at
    store.invalidate_tags(post.cache_tag)
    assert_equal "second", render(keyed, post: post, body: -> { post_class.find(post.id).title }), "the name's record tags it"

    listed = "<% cache 'list', tags: posts do %><%= body.call %><% end %>"
    assert_equal "1 post", render(listed, posts: post_class.all, body: -> { "#{post_class.count} post" })
    post_class.create!(title: "another") # after_commit: the collection tag
    assert_equal "2 posts", render(listed, posts: post_class.all, body: -> { "#{post_class.count} posts" }), "a relation in tags:"
  end

  # Rails' stock page: the outer fragment keyed by the page, the inner one by a record the
  # controller loaded before rendering. A change of that record committed between its load and
  # the inner fragment's stamps: the inner fragment shows the loaded record under its old key
  # with the new versions, and the outer one would keep that for good (its key did not change).
  # Neither is cached; the next page shows the change.
  def test_a_record_changed_between_its_load_and_its_fragment_is_not_cached
    post = post_class.create!(title: "first")
    page = "<% cache 'page' do %>[<% cache post do %><%= post.title %><% end %>]<% end %>"
    loaded = post_class.find(post.id)
    post_class.find(post.id).update!(title: "second") # commits after the load
    assert_equal "[first]", render(page, post: loaded), "what the request loaded"
    assert_equal "[second]", render(page, post: post_class.find(post.id)), "the page built from older data was not cached"
    assert_equal "[second]", render(page, post: post_class.find(post.id))
    assert_equal "[second]", render(page, post: loaded), "cached now: a hit whatever the caller loaded"
  end

  # The check of the records costs a query when a missed fragment is written, none on a hit.
  def test_a_fragment_hit_reads_no_record_again
    post = post_class.create!(title: "first")
    page = "<% cache post do %><%= post.title %><% end %>"
    assert_equal 1, posts_queries { render(page, post: post) }, "the miss checks the post's updated_at"
    assert_equal 0, posts_queries { assert_equal "first", render(page, post: post) }
  end

  def test_tags_take_records_and_models_at_the_api_too
    post = post_class.create!(title: "first")
    store.fetch("json", tags: post) { "v1" }
    store.write("index", "all", tags: post_class)
    post.update!(title: "changed")
    assert_nil store.read("json")
    assert_nil store.read("index")
    assert_raises(ArgumentError) { store.fetch("k", tags: post_class.new) { "unsaved" } }
    assert_raises(ArgumentError) { store.fetch("k", tags: Object.new) { "v" } }
  end
end

# The same on PostgreSQL: the models and the SQL tier in a schema of the test's own.
class StrataStoreFragmentsPostgresTest < StrataStoreFragmentsTest
  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  class Post < Record
    self.table_name = "posts"
    include Strata::Model
  end

  def connect
    @schema = Strata::TestSupport::PostgresCluster.connect_to_new_schema(record, "strata_frag")
  end

  def disconnect
    Strata::TestSupport::PostgresCluster.drop_schema(record, @schema)
  end
end
