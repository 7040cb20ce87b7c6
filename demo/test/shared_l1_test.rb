# frozen_string_literal: true

require_relative "test_helper"

# Both Puma workers map the L1 table the app opened before forking.
class SharedL1Test < DemoHTTP::Test
  BUG = 290

  def test_the_second_workers_first_request_for_an_entry_is_an_l1_hit
    first, second = server.worker_pids
    built = server.on_worker(first) { server.get("/bugs/#{BUG}") }
    assert_equal [first.to_s, "miss"], [built["X-Worker-Pid"], built["X-Cache"]]

    # The SQL tier's copy goes (a delete of its rows by another connection, which no log
    # carries): a hit now can only come from L1.
    server.execute_sql("DELETE FROM strata_entries")
    hit = server.on_worker(second) { server.get("/bugs/#{BUG}") }

    assert_equal [second.to_s, "hit"], [hit["X-Worker-Pid"], hit["X-Cache"]]
    assert_equal built.body, hit.body
  end

  def test_a_collection_page_is_joined_from_the_entries_either_worker_built
    first, second = server.worker_pids
    page = "/bugs?start=150&size=75"
    built = server.on_worker(first) { server.get(page) }
    assert_equal "75", built["X-Cache-Misses"]

    joined = server.on_worker(second) { server.get(page) }

    assert_equal "0", joined["X-Cache-Misses"]
    assert_equal built.body, joined.body
    assert_equal({"total_size" => 300, "start" => 150}, json(joined).except("entries"))
    assert_equal (151..225).to_a, json(joined)["entries"].map { |entry| entry["id"] }
  end
end
