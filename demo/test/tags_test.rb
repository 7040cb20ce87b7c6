# frozen_string_literal: true

require_relative "test_helper"

# A tag added to a bug changes the bug's JSON (BugTag's cascade invalidates the bug's tag) and
# so the collection page joined from it, on both workers.
class TagsTest < DemoHTTP::Test
  BUG = 5
  PAGE = "/bugs?start=0&size=50"

  def test_a_new_tag_changes_the_bugs_entry_and_the_collection
    on_each_worker { server.get("/bugs/#{BUG}") }.each { |response| refute_includes json(response)["tags"], "demo-verified" }
    on_each_worker { server.get(PAGE) }.each { |response| refute_includes entry_in(response, BUG)["tags"], "demo-verified" }

    created = server.request(:post, "/bugs/#{BUG}/tags", body: {name: "demo-verified"})

    assert_equal "201", created.code, created.body
    assert_includes json(created)["tags"], "demo-verified"
    # Built once, by the POST. On SQLite the trigger's raw tags (BugTag cascades to its bug)
    # become versions when the poller converts them, after the POST's own bump: the bug's entry
    # may be built once more (docs/coherence.md, "Raw SQL: triggers").
    once = !server.postgres?
    on_each_worker { server.get("/bugs/#{BUG}") }.each do |response|
      assert_includes json(response)["tags"], "demo-verified"
      assert_equal "hit", response["X-Cache"] unless once
    end
    on_each_worker { server.get(PAGE) }.each do |response|
      assert_includes entry_in(response, BUG)["tags"], "demo-verified"
      assert_equal "0", response["X-Cache-Misses"] unless once
    end
  end

  # A tag added by a raw INSERT (not through BugTag): the triggers, generated from BugTag's
  # strata_cascade, change the bug's tags too, so both workers serve the bug with it.
  def test_a_tag_inserted_by_raw_sql_changes_the_bugs_entry
    bug = 6
    on_each_worker { server.get("/bugs/#{bug}") }.each { |response| refute_includes json(response)["tags"], "raw-tag" }

    placeholders = server.postgres? ? "$1, $2, $3, $3" : "?, ?, ?, ?"
    now = Time.now.utc.strftime("%Y-%m-%d %H:%M:%S")
    server.execute_sql("INSERT INTO bug_tags (bug_id, name, created_at, updated_at) VALUES (#{placeholders})", bug, "raw-tag", *(server.postgres? ? [now] : [now, now]))

    seen = wait_until(RAW_SQL_BOUND) { on_each_worker { server.get("/bugs/#{bug}") }.all? { |response| json(response)["tags"].include?("raw-tag") } }
    assert seen, "a raw INSERT into bug_tags did not reach the bug within #{RAW_SQL_BOUND} s"
  end
end
