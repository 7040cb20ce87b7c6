# frozen_string_literal: true

class Project < ApplicationRecord
  include Strata::Model

  has_many :bugs
end
