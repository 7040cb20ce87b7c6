# frozen_string_literal: true

class BugTag < ApplicationRecord
  include Strata::Model

  belongs_to :bug
  # A tag added, renamed or removed changes its bug: the bug's tag ("bugs/42") and the
  # collection's ("bugs") are invalidated with the tag's own.
  strata_cascade :bug

  validates :name, presence: true, format: {with: /\A[a-z0-9][a-z0-9.+-]*\z/}, uniqueness: {scope: :bug_id}
end
