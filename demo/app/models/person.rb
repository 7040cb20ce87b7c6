# frozen_string_literal: true

class Person < ApplicationRecord
  include Strata::Model

  has_many :bugs, foreign_key: :owner_id, inverse_of: :owner
end
