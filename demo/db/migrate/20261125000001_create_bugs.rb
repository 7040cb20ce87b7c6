# frozen_string_literal: true

# Launchpad's shapes, cut down: projects, people, bugs (each in a project, owned by a person) and
# the bugs' tags.
class CreateBugs < ActiveRecord::Migration[7.2]
  def change
    create_table :projects do |t|
      t.string :name, null: false
      t.timestamps
    end

    create_table :people do |t|
      t.string :name, null: false
      t.string :email, null: false
      t.timestamps
    end

    create_table :bugs do |t|
      t.references :project, null: false, foreign_key: true
      t.references :owner, null: false, foreign_key: {to_table: :people}
      t.string :title, null: false
      t.text :description, null: false, default: ""
      t.string :status, null: false
      t.string :importance, null: false
      t.timestamps
    end

    create_table :bug_tags do |t|
      t.references :bug, null: false, foreign_key: true, index: false
      t.string :name, null: false
      t.timestamps
    end
    add_index :bug_tags, %i[bug_id name], unique: true
  end
end
