# frozen_string_literal: true

Rails.application.routes.draw do
  resources :bugs, only: %i[index show update] do
    resources :tags, only: :create, controller: "bug_tags"
  end
  # Server-rendered pages (PagesController): view fragments, a representation of loaded records;
  # projects renamed (ProjectsController).
  get "pages/bugs/:id", to: "pages#bug"
  get "pages/bugs_loaded/:id", to: "pages#bug_loaded"
  get "pages/bugs_stock/:id", to: "pages#bug_stock"
  resources :projects, only: :update
end
