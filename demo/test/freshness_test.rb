# frozen_string_literal: true

require_relative "test_helper"

# A bug changed by any path is served fresh by both workers on their next request: its entry
# and the collection page it is on.
class FreshnessTest < DemoHTTP::Test
  def test_a_bug_updated_through_the_api
    assert_fresh_after_change(231, "Updated through the API") do |title|
      response = server.request(:patch, "/bugs/231", body: {bug: {title: title}})
      assert_equal "200", response.code, response.body
      assert_equal title, json(response)["title"]
    end
  end

  # The Rails console's way: bin/rails runner, in a process of its own that maps the same L1.
  def test_a_bug_updated_from_the_rails_runner
    assert_fresh_after_change(232, "Updated from the Rails runner") do |title|
      server.rails_runner("Bug.find(ARGV[0]).update!(title: ARGV[1])", "232", title)
    end
  end

  # A raw UPDATE on a connection of its own (the pg or sqlite3 gem, not Rails): the triggers
  # (bin/rails generate strata:triggers bugs bug_tags) bump the bug's tags in the SQL tier and
  # log them (on SQLite through the poller, which turns their raw tag rows into versions); the
  # poller drops the workers' L1 copies of the versions.
  def test_a_bug_updated_by_raw_sql
    sql = server.postgres? ? "UPDATE bugs SET title = $1 WHERE id = $2" : "UPDATE bugs SET title = ? WHERE id = ?"
    assert_fresh_after_change(233, "Updated by raw SQL") do |title|
      server.execute_sql(sql, title, 233)
      fresh = wait_until(RAW_SQL_BOUND) { json(server.get("/bugs/233"))["title"] == title }
      assert fresh, "a raw UPDATE was not seen within #{RAW_SQL_BOUND} s"
    end
  end

  # A page's rows are cached under the bugs' collection tag (BugJson.page_rows), as is the
  # total: a bug added by a raw INSERT (the triggers bump the collection tag) shows on the page
  # past the last bug, and in the total, on both workers; a raw DELETE takes it away again.
  def test_a_bug_inserted_by_raw_sql_shows_on_its_page
    total = json(server.get("/bugs?start=0&size=1"))["total_size"]
    page = "/bugs?start=#{total}&size=10"
    on_each_worker { server.get(page) }.each { |response| assert_equal [], json(response)["entries"] }

    title = "Inserted by raw SQL"
    columns = "project_id, owner_id, title, description, status, importance, created_at, updated_at"
    values = server.postgres? ? "$1, $2, $3, '', 'New', 'Low', $4, $4" : "?, ?, ?, '', 'New', 'Low', ?, ?"
    now = Time.now.utc.strftime("%Y-%m-%d %H:%M:%S")
    server.execute_sql("INSERT INTO bugs (#{columns}) VALUES (#{values})", 1, 1, title, *(server.postgres? ? [now] : [now, now]))

    assert page_shows(page, [title], total + 1), "a raw INSERT was not on the page within #{RAW_SQL_BOUND} s"

    # The other tests count on the seeded 300 bugs: the bug goes, and every worker sees it gone.
    server.execute_sql("DELETE FROM bugs WHERE title = #{server.postgres? ? "$1" : "?"}", title)
    deleted = true
    assert page_shows(page, [], total), "a raw DELETE was not on the page within #{RAW_SQL_BOUND} s"
  ensure
    server.execute_sql("DELETE FROM bugs WHERE title = #{server.postgres? ? "$1" : "?"}", title) if title && !deleted
  end

  private

  # Whether, within RAW_SQL_BOUND, both workers' page shows bugs of these titles and this total.
  def page_shows(page, titles, total)
    wait_until(RAW_SQL_BOUND) do
      on_each_worker { server.get(page) }.all? do |response|
        body = json(response)
        body["entries"].map { |entry| entry["title"] } == titles && body["total_size"] == total
      end
    end
  end

  # Caches bug id's entry and page on both workers, yields the new title to the block that
  # changes it, then checks each worker's next entry and page show it.
  def assert_fresh_after_change(id, title)
    page = "/bugs?start=225&size=50"
    on_each_worker { server.get("/bugs/#{id}") }.each { |response| refute_equal title, json(response)["title"] }
    on_each_worker { server.get(page) }.each { |response| refute_equal title, entry_in(response, id)["title"] }

    yield title

    on_each_worker { server.get("/bugs/#{id}") }.each { |response| assert_equal title, json(response)["title"] }
    on_each_worker { server.get(page) }.each { |response| assert_equal title, entry_in(response, id)["title"] }
  end
end
