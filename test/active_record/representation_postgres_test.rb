# frozen_string_literal: true

require_relative "../strata_store/store_case"
require "strata/model"
require "strata/tiers/sql"
require "support/postgres_cluster"
require_relative "representation_reload_cases"

# RepresentationReloadCases on PostgreSQL (models and the SQL tier in a schema of the test's own),
# the store over L1 and that SQL tier.
class StrataRepresentationPostgresTest < Strata::StoreCase
  include RepresentationReloadCases

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  class Person < Record
    self.table_name = "people"
    include Strata::Model
  end

  class Ticket < Record
    self.table_name = "tickets"
    include Strata::Model

    belongs_to :owner, class_name: "StrataRepresentationPostgresTest::Person", optional: true
  end

  def setup
    @schema = Strata::TestSupport::PostgresCluster.connect_to_new_schema(Record, "strata_rep")
    Record.connection_pool.with_connection do |c|
      c.create_table(:people) { |t| t.string :email }
      c.create_table(:tickets) do |t|
        t.string :title
        t.references :owner
      end
    end
    Strata::Tiers::SQL.create_table!(Record)
    Strata::Model.cache_store = store
  end

  def teardown
    Strata::Model.cache_store = nil
    Strata::TestSupport::PostgresCluster.drop_schema(Record, @schema)
  end

  def store
    @store ||= build_store(sql: {connection_class: Record})
  end

  def ticket_class
    Ticket
  end

  def person_class
    Person
  end

  def new_ticket(title)
    Ticket.create!(title: title)
  end
end
