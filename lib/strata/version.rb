# frozen_string_literal: true

module Strata
  VERSION = "0.1.0"
end
