# frozen_string_literal: true

require_relative "test_helper"

# The promise where Rails apps cache, under load (issue 35): readers request three pages of the
# same bugs without pause while the bugs are updated through the API, and each page, requested
# right after each update's response, shows that update. The pages: view fragments nested three
# deep (PagesController#bug), Rails' stock key-based fragments with a cached collection, whose
# project is renamed with each update (PagesController#bug_stock), a representation given
# records loaded with includes before the call (PagesController#bug_loaded), and the API's entry
# (a fetch through a handle). Before
# issue 35, the fragment page was stale in 9 of 300 updates and the representation's in 42,
# staying stale until the next change.
#
# On SQLite too: before Strata::SQLiteBusyHandler (the Railtie's, before Active Record 8.0), a
# reader's cache write waiting for the file's lock in busy_timeout held the GVL, so the writer's
# transaction in the same worker could not commit: its UPDATE failed (500, "database is
# locked") after the 5 s timeout now and then.
class UnderLoadTest < DemoHTTP::Test
  UPDATES = 300
  READERS = 4
  # A reader's loop ends at the latest this many seconds after the test began.
  DEADLINE = 120
  TITLE = ->(body) { body[%r{<h1 id="title">(.*?)</h1>}m, 1] }
  # What a page shows of the change: its bug's title; the stock page, also its project's name.
  PAGES = {
    "fragments" => [291, ->(id) { "/pages/bugs/#{id}" }, TITLE],
    "stock" => [294, ->(id) { "/pages/bugs_stock/#{id}" }, ->(body) { "#{TITLE.call(body)} in #{body[%r{<p id="project">(.*?)</p>}m, 1]}" }],
    "loaded" => [292, ->(id) { "/pages/bugs_loaded/#{id}" }, ->(body) { JSON.parse(body)["title"] }],
    "fetch" => [293, ->(id) { "/bugs/#{id}" }, ->(body) { JSON.parse(body)["title"] }]
  }.freeze
  # The stock page's project, renamed with each update: its fragment's key changes, the page's
  # key does not (the bug is not touched).
  PROJECT = 9

  def test_no_page_is_stale_after_an_update_while_readers_run
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    stop = false
    errors = Queue.new
    readers = Array.new(READERS) do
      Thread.new do
        # Bound: until the test stops it, or DEADLINE.
        until stop || Process.clock_gettime(Process::CLOCK_MONOTONIC) - started > DEADLINE
          PAGES.each_value do |id, path, _|
            code = server.get(path.call(id)).code
            errors << "#{path.call(id)}: #{code}" unless code == "200"
          end
        end
      end
    end

    stale = Hash.new(0)
    last = nil
    UPDATES.times do |n|
      last = "Under load #{n}"
      PAGES.each_value do |id, _, _|
        response = server.request(:patch, "/bugs/#{id}", body: {bug: {title: last}})
        assert_equal "200", response.code, response.body
      end
      response = server.request(:patch, "/projects/#{PROJECT}", body: {project: {name: "project #{n}"}})
      assert_equal "200", response.code, response.body
      PAGES.each do |name, (id, path, shown)|
        response = server.get(path.call(id))
        assert_equal "200", response.code, response.body
        stale[name] += 1 unless shown.call(response.body) == expected(name, n)
      end
    end
    stop = true
    readers.each { |reader| reader.join(DEADLINE) }

    assert_empty Array.new(errors.size) { errors.pop }, "readers' requests failed"
    assert_equal({}, stale, "pages stale right after an update's response, of #{UPDATES}")
    sleep 1
    PAGES.each do |name, (id, path, shown)|
      on_each_worker { server.get(path.call(id)) }.each do |response|
        assert_equal expected(name, UPDATES - 1), shown.call(response.body), "#{name}, 1 s later"
      end
    end
  ensure
    stop = true
  end

  private

  def expected(page, n)
    (page == "stock") ? "Under load #{n} in project #{n}" : "Under load #{n}"
  end
end
