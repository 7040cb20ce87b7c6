# frozen_string_literal: true

# Server-rendered pages over the same bugs, for what most Rails apps cache (the API's JSON is in
# BugsController):
# GET /pages/bugs/:id         a bug's HTML page in three nested view fragments (the page, the
#                             bug, its title), named by id and tagged with the bug; the bug is
#                             loaded inside them (docs/coherence.md, "View fragments")
# GET /pages/bugs_stock/:id   the bug's page in Rails' stock key-based fragments (cache [bug,
#                             bug.tags], cache bug.project, a cached collection of its tags),
#                             the bug and what they show loaded before them
# GET /pages/bugs_loaded/:id  the bug's JSON from BugJson's representation, given the Bug loaded
#                             with includes before the call (docs/representation.md, "Records
#                             loaded before a change")
class PagesController < ActionController::Base
  before_action { response.set_header("X-Worker-Pid", Process.pid.to_s) }

  def bug
    @id = Integer(params[:id], 10)
  end

  def bug_stock
    @bug = Bug.includes(:project, :tags).find(params[:id])
  end

  def bug_loaded
    bug = Bug.includes(:project, :owner, :tags).find(params[:id])
    render json: BugJson.for("strata").entry(bug, viewer: Viewer::ADMIN)
  end
end
