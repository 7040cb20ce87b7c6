# frozen_string_literal: true

# Lets Bundler.require find the gem by its published name.
require "strata"
