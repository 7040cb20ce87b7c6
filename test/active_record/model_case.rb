# frozen_string_literal: true

require_relative "../strata_store/store_case"
require "strata/model"

module Strata
  # Base of the Strata::Model tests: an SQLite database in the test's directory with bugs, tags
  # on them (cascading to their bug) and projects (bugs cascade to their project), and a store
  # over L1 that the models invalidate through.
  class ModelCase < StoreCase
    class Record < ActiveRecord::Base
      self.abstract_class = true
    end

    class Project < Record
      include Strata::Model
    end

    class Bug < Record
      include Strata::Model

      belongs_to :project, optional: true
      strata_cascade :project
    end

    class BugTag < Record
      include Strata::Model

      belongs_to :bug
      strata_cascade :bug
    end

    # A model without Strata::Model, for the cascade that ends at a plain table.
    class Comment < Record
    end

    class Note < Record
      include Strata::Model

      belongs_to :comment
      strata_cascade :comment
    end

    class Attachment < Record
      include Strata::Model

      belongs_to :owner, polymorphic: true
      strata_cascade :owner
    end

    def setup
      connect_models
      Record.connection_pool.with_connection do |connection|
        connection.create_table(:projects) { |t| t.string :name }
        connection.create_table(:bugs) do |t|
          t.string :title
          t.references :project
          t.datetime :updated_at
        end
        connection.create_table(:bug_tags) do |t|
          t.string :name
          t.references :bug
        end
        connection.create_table(:comments) { |t| t.string :body }
        connection.create_table(:notes) { |t| t.references :comment }
        connection.create_table(:attachments) { |t| t.references :owner, polymorphic: true }
      end
      Strata::Model.cache_store = store
    end

    def teardown
      Strata::Model.cache_store = nil
      disconnect_models
      leftover = Strata::TransactionTags.current
      ActiveSupport::IsolatedExecutionState.delete(Strata::TransactionTags::KEY)
      assert_nil leftover, "every transaction's tags were taken or forgotten when it ended"
    end

    # The models' database: an SQLite file in the test's directory.
    def connect_models
      Record.establish_connection(adapter: "sqlite3", database: File.join(@tmpdir, "app.sqlite3"), pool: 5)
    end

    def disconnect_models
      Record.remove_connection
    end

    # Counts the block's runs: fetch(key, tags:) through counted returns how many ran so far.
    def counted(key, tags, cache: store)
      @runs ||= Hash.new(0)
      cache.fetch(key, tags: tags) { @runs[key] += 1 }
    end

    def runs(key)
      @runs ? @runs[key] : 0
    end
  end
end
