# frozen_string_literal: true

# The tables of Strata's SQL cache tier (Strata::Tiers::SQL; Strata::Tiers::SQL::Schema says what
# each column holds): the entries, the tag versions and the invalidation log. Times are unix
# milliseconds; expires_at 0 means never.
class CreateStrataEntries < ActiveRecord::Migration[7.2]
  def change
    create_table :strata_entries do |t|
      t.bigint :key_hash, null: false
      t.bigint :expires_at, null: false, default: 0
      t.bigint :created_at, null: false
      t.integer :byte_size, null: false
      t.binary :key, null: false
      t.binary :value, null: false, **value_limit
    end
    add_index :strata_entries, :key_hash, unique: true

    create_table :strata_entries_versions, id: false do |t|
      t.bigint :tag_id, null: false, primary_key: true, default: nil # not auto-increment
      t.bigint :version, null: false
    end

    create_table :strata_entries_log do |t|
      t.bigint :created_at, null: false
      t.bigint :tag_id
      t.binary :key
    end
  end

  private

  # MySQL makes a binary column a blob of at most 64 KiB; with this limit it is a longblob.
  def value_limit
    connection.adapter_name.match?(/mysql|trilogy/i) ? {limit: 16.megabytes} : {}
  end
end
