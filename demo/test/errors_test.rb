# frozen_string_literal: true

require_relative "test_helper"

# What the API answers to requests it can't serve as asked: 400, 404 or 422 with the reason,
# never a 500.
class ErrorsTest < DemoHTTP::Test
  def test_bad_parameters_and_headers_are_400
    {
      "/bugs?start=-1" => "start must be in 0..",
      "/bugs?size=301" => "size must be in 1..300",
      "/bugs?size=x" => "size must be an integer"
    }.each do |path, reason|
      response = server.get(path)
      assert_equal "400", response.code, path
      assert_includes json(response)["error"], reason
    end
    assert_equal "400", server.get("/bugs/299", headers: {"X-Viewer" => "root"}).code
    assert_equal "400", server.get("/bugs/299", headers: {"X-Representation-Cache" => "redis"}).code
  end

  def test_a_missing_bug_is_404_and_an_invalid_change_422
    assert_equal "404", server.get("/bugs/100000").code
    assert_equal "422", server.request(:patch, "/bugs/299", body: {bug: {status: "Nope"}}).code
    assert_equal "422", server.request(:post, "/bugs/299/tags", body: {name: "Not A Tag"}).code
    refute_equal "Nope", json(server.get("/bugs/299"))["status"]
  end
end
