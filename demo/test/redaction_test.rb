# frozen_string_literal: true

require_relative "test_helper"

# An owner's email is for admins and the owner (Viewer#sees_email_of?). The cache holds each
# entry's full JSON; what other viewers receive never has the field, whoever filled the cache.
class RedactionTest < DemoHTTP::Test
  ADMIN = {"X-Viewer" => "admin"}.freeze
  EMAIL = /@example\.com/

  def test_an_anonymous_viewer_never_receives_an_owners_email
    full = server.get("/bugs/60", headers: ADMIN)
    assert_match EMAIL, json(full)["owner_email"]
    on_each_worker { server.get("/bugs/60") }.each do |response|
      assert_equal "hit", response["X-Cache"]
      refute json(response).key?("owner_email")
      refute_match EMAIL, response.body
      assert_equal json(full).except("owner_email"), json(response)
    end

    page = "/bugs?start=50&size=25"
    server.get(page, headers: ADMIN).then { |response| assert json(response)["entries"].all? { |entry| entry.key?("owner_email") } }
    on_each_worker { server.get(page) }.each do |response|
      assert_equal "0", response["X-Cache-Misses"]
      assert_equal 25, json(response)["entries"].size
      refute_match EMAIL, response.body
    end
  end

  def test_a_viewer_built_entry_keeps_the_field_for_those_who_may_see_it
    page = "/bugs?start=75&size=25"
    anonymous = server.get(page)
    assert_equal "25", anonymous["X-Cache-Misses"]
    refute_match EMAIL, anonymous.body

    admin = server.get(page, headers: ADMIN)
    assert_equal "0", admin["X-Cache-Misses"]
    assert json(admin)["entries"].all? { |entry| entry["owner_email"]&.match?(EMAIL) }
  end

  def test_an_owner_receives_their_own_email_only
    owner = json(server.get("/bugs/120", headers: ADMIN))["owner_email"][/\Aperson(\d+)@/, 1]
    page = "/bugs?start=100&size=50"

    on_each_worker { server.get(page, headers: {"X-Viewer" => "person:#{owner}"}) }.each do |response|
      entries = json(response)["entries"]
      own, others = entries.partition { |entry| entry["owner_name"] == "Person #{owner}" }
      assert_includes own.map { |entry| entry["id"] }, 120
      assert own.all? { |entry| entry["owner_email"] == "person#{owner}@example.com" }
      assert others.none? { |entry| entry.key?("owner_email") }
      assert_equal ["person#{owner}@example.com"], response.body.scan(/[\w.]+@example\.com/).uniq
    end
  end
end
