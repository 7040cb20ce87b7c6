# frozen_string_literal: true

Rails.application.routes.draw do
  resources :bugs, only: %i[index show update] do
    resources :tags, only: :create, controller: "bug_tags"
  end
end
