# frozen_string_literal: true

# PATCH /projects/:id {"project": {"name": "..."}}: renames a project. Every bug of the project
# shows its name, and no bug's cache key changes (no `touch: true`): the pages that show it are
# invalidated by the project's tag alone.
class ProjectsController < ApplicationController
  def update
    project = Project.find(params[:id])
    project.update!(params.require(:project).permit(:name))
    render json: {id: project.id, name: project.name}
  end
end
