# frozen_string_literal: true

require_relative "test_helper"
require "digest"

# A GET's ETag is its JSON's (the controllers' stale?): the value Rack::ETag would give, a
# client that sends it back gets 304 and no body, and once the bug changes, by any path, the
# next conditional GET on either worker gets the new JSON and a new ETag.
class ConditionalGetTest < DemoHTTP::Test
  ENTRY = "/bugs/280"
  PAGE = "/bugs?start=275&size=14" # bugs 276-289

  def test_an_entry_and_a_page_carry_the_etag_of_their_json
    [ENTRY, PAGE].each do |path|
      response = server.get(path)
      assert_equal "200", response.code, response.body
      assert_equal rack_etag(response.body), response["ETag"], path
    end
  end

  def test_a_matching_if_none_match_is_answered_304_without_a_body
    [ENTRY, PAGE].each do |path|
      etag = server.get(path)["ETag"]
      on_each_worker(code: "304") { server.get(path, headers: {"If-None-Match" => etag}) }.each do |response|
        assert_nil response.body, path
        assert_equal etag, response["ETag"], path
      end
    end
  end

  def test_a_changed_bug_is_sent_again_with_a_new_etag
    entry_etag = server.get(ENTRY)["ETag"]
    page_etag = server.get(PAGE)["ETag"]
    title = "Changed under an ETag"
    response = server.request(:patch, ENTRY, body: {bug: {title: title}})
    assert_equal "200", response.code, response.body

    on_each_worker { server.get(ENTRY, headers: {"If-None-Match" => entry_etag}) }.each do |fresh|
      assert_equal title, json(fresh)["title"]
      refute_equal entry_etag, fresh["ETag"]
    end
    on_each_worker { server.get(PAGE, headers: {"If-None-Match" => page_etag}) }.each do |fresh|
      assert_equal title, json(fresh)["entries"].find { |entry| entry["id"] == 280 }["title"]
      refute_equal page_etag, fresh["ETag"]
    end
  end

  private

  # What Rack::ETag makes of a body: a weak ETag of the first 32 hex digits of its SHA-256.
  def rack_etag(body)
    %(W/"#{Digest::SHA256.hexdigest(body)[0, 32]}")
  end
end
