# frozen_string_literal: true

# POST /bugs/:bug_id/tags {"name": "..."}: tags a bug and answers with the bug's JSON, which the
# new tag changed (BugTag's cascade invalidated the bug's tag).
class BugTagsController < ApplicationController
  def create
    bug = Bug.find(params[:bug_id])
    bug.tags.create!(name: params.require(:name))
    json = representation.entry(bug, viewer: viewer)
    render json: json, status: :created
  end
end
