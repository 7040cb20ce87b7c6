# frozen_string_literal: true

# GET /bugs?start=0&size=75, GET /bugs/:id, PATCH /bugs/:id: Launchpad's bug collection and
# entries, as JSON strings from BugJson. X-Cache says whether the entry came from the cache
# (hit) or was built (miss); a page's X-Cache-Misses, how many of its entries were built.
#
# A GET's ETag is the JSON's, given by stale? (a conditional GET whose If-None-Match still
# matches is answered 304, no body). Rack::ETag would give the same value, a SHA-256 of the
# body, but with Ruby's own digest; Active Support's is OpenSSL's, 7x faster on a page's 46 KB
# here (docs/representation.md, "Conditional GET").
class BugsController < ApplicationController
  DEFAULT_SIZE = 75
  MAX_SIZE = 300

  def index
    start = integer_param(:start, 0, 0..)
    size = integer_param(:size, DEFAULT_SIZE, 1..MAX_SIZE)

    page = Bug.order(:id).offset(start).limit(size)
    envelope = {"total_size" => BugJson.total_size(cache_name), "start" => start}
    json = begin
      representation.collection(page_bugs(page, start, size), viewer: viewer, envelope: envelope)
    rescue ActiveRecord::RecordNotFound
      # The cached rows named a bug deleted since (its own tag reached this host a moment before
      # the collection's, or another host deleted it within the coherence bound): the page's
      # rows from the database this once.
      representation.collection(BugRow.of(page), viewer: viewer, envelope: envelope)
    end
    response.set_header("X-Cache-Misses", Current.builds.to_s)
    render json: json if stale?(etag: json)
  end

  def show
    id = params[:id]
    render_entry((cache_name == "none") ? Bug.find(id) : BugRow.find(id), conditional: true)
  end

  def update
    bug = Bug.find(params[:id])
    bug.update!(params.require(:bug).permit(:title, :description, :status, :importance))
    render_entry(bug)
  end

  private

  # Without a cache every entry is built: load what they show in four queries, not four per bug.
  # With one, the page's BugRows (cached under the bugs' collection tag) are enough for its
  # cached entries.
  def page_bugs(page, start, size)
    (cache_name == "none") ? page.preload(:project, :owner, :tags) : BugJson.page_rows(cache_name, start, size)
  end

  # conditional: answer 304 when the request's If-None-Match is this JSON's ETag (a GET).
  def render_entry(bug, conditional: false)
    json = representation.entry(bug, viewer: viewer)
    response.set_header("X-Cache", Current.builds.zero? ? "hit" : "miss")
    render json: json if !conditional || stale?(etag: json)
  end
end
