# frozen_string_literal: true

module Strata
  module Generators
    # The strata_cascade declarations of an app's models as the triggers migration's CASCADES:
    #
    #   {"bug_tags" => {"primary_key" => "id", "parents" => [{"column" => "bug_id", "table" => "bugs"}]},
    #    "notes" => {"primary_key" => "id", "parents" => [{"column" => "notable_id",
    #      "type_column" => "notable_type", "tables" => {"Bug" => "bugs", "Project" => "projects"}}]}}
    #
    # Only the tables reachable from the ones given: a trigger walks from its table's parents to
    # theirs (Strata::Model does the same in Ruby after a commit).
    module Cascades
      module_function

      # CASCADES for tables, from models (the app's Active Record classes, loaded).
      def of_models(tables, models)
        models = models.reject { |model| model.abstract_class? || model.table_name.nil? }
        declared = {}
        models.each do |model|
          next unless model.include?(Strata::Model) && model.strata_cascades.any?

          cascade = declared[model.table_name] ||= {"primary_key" => model.primary_key.to_s, "parents" => []}
          model.strata_cascades.each do |name|
            parent = parent_of(model, name, models)
            cascade["parents"] << parent unless cascade["parents"].include?(parent)
          end
        end
        reachable(tables, declared)
      end

      # The CASCADES entry of model's belongs_to name.
      def parent_of(model, name, models)
        reflection = model.reflect_on_association(name)
        raise ArgumentError, "#{model.name}: strata_cascade #{name.inspect} names no belongs_to association" unless reflection&.belongs_to?
        return {"column" => reflection.foreign_key.to_s, "table" => reflection.klass.table_name} unless reflection.polymorphic?

        # Any model may be the parent: the type column holds its polymorphic_name.
        tables = models.to_h { |candidate| [candidate.polymorphic_name, candidate.table_name] }.sort.to_h
        {"column" => reflection.foreign_key.to_s, "type_column" => reflection.foreign_type.to_s, "tables" => tables}
      end

      # The entries of declared reachable from tables through their parents.
      def reachable(tables, declared)
        found = {}
        queue = tables.dup
        while (table = queue.shift)
          next if found.key?(table) || !declared.key?(table)

          found[table] = declared[table]
          found[table]["parents"].each { |parent| queue.concat(parent["tables"]&.values || [parent["table"]]) }
        end
        found.sort.to_h
      end

      # cascades as Ruby source, one table per line, for the migration.
      def source(cascades)
        return "{}.freeze" if cascades.empty?

        lines = cascades.map { |table, cascade| "    #{table.inspect} => #{literal(cascade)}" }
        "{\n#{lines.join(",\n")}\n  }.freeze"
      end

      def literal(value)
        case value
        when Hash then "{#{value.map { |key, item| "#{key.inspect} => #{literal(item)}" }.join(", ")}}"
        when Array then "[#{value.map { |item| literal(item) }.join(", ")}]"
        else value.inspect
        end
      end
    end
  end
end
