# frozen_string_literal: true

class Bug < ApplicationRecord
  include Strata::Model
  include BugCacheIdentity

  STATUSES = ["New", "Confirmed", "Triaged", "In Progress", "Fix Committed", "Fix Released"].freeze
  IMPORTANCES = %w[Undecided Wishlist Low Medium High Critical].freeze

  belongs_to :project
  belongs_to :owner, class_name: "Person"
  has_many :tags, -> { order(:name) }, class_name: "BugTag", inverse_of: :bug

  validates :title, presence: true
  validates :status, inclusion: {in: STATUSES}
  validates :importance, inclusion: {in: IMPORTANCES}
end
