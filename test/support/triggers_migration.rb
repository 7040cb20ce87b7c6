# frozen_string_literal: true

require "erb"
require "generators/strata/triggers/cascades"

module Strata
  module TestSupport
    # The strata:triggers migration as its template renders it, without Rails' generator: for
    # the tests that install the triggers on a database of their own.
    module TriggersMigration
      TEMPLATE = File.expand_path("../../lib/generators/strata/triggers/templates/add_strata_triggers.rb.tt", __dir__)

      # What the template sees of the generator.
      Context = Struct.new(:migration_class_name, :tables, :primary_key, :table_name, :cascades) do
        def render(template)
          ERB.new(template, trim_mode: "-").result(binding)
        end

        def cascades_source
          Strata::Generators::Cascades.source(cascades)
        end
      end

      module_function

      # The migration class for tables (table_name: the SQL tier's entries table; cascades: its
      # CASCADES, as Strata::Generators::Cascades.of_models makes them).
      def triggers_migration(tables, table_name: "strata_entries", primary_key: "id", cascades: {})
        source = Context.new("AddStrataTriggers", tables, primary_key, table_name, cascades).render(File.read(TEMPLATE))
        namespace = Module.new
        namespace.module_eval(source, "migration.rb")
        namespace::AddStrataTriggers
      end

      # Runs the triggers migration for tables in direction on connection, without its output.
      def migrate_triggers(connection, tables, direction = :up, **options)
        verbose = ActiveRecord::Migration.verbose
        ActiveRecord::Migration.verbose = false
        triggers_migration(tables, **options).new.exec_migration(connection, direction)
      ensure
        ActiveRecord::Migration.verbose = verbose
      end
    end
  end
end
