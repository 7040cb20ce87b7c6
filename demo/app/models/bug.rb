# frozen_string_literal: true

class Bug < ApplicationRecord
  include Strata::Model

  STATUSES = ["New", "Confirmed", "Triaged", "In Progress", "Fix Committed", "Fix Released"].freeze
  IMPORTANCES = %w[Undecided Wishlist Low Medium High Critical].freeze

  belongs_to :project
  belongs_to :owner, class_name: "Person"
  has_many :tags, -> { order(:name) }, class_name: "BugTag", inverse_of: :bug

  validates :title, presence: true
  validates :status, inclusion: {in: STATUSES}
  validates :importance, inclusion: {in: IMPORTANCES}

  # The tags the bug's JSON (BugJson) is stamped with: its own, which its tags' changes reach by
  # cascade (BugTag), and those of the project and the owner whose names (and email) it shows.
  def strata_cache_tags
    [cache_tag, Project.cache_tag_for(project_id), Person.cache_tag_for(owner_id)]
  end
end
