# frozen_string_literal: true

require "test_helper"
require "erb"
require "rbconfig"
require "strata/tiers/sql"

# The strata:sql generator's migration: run against SQLite, it makes the table Schema.create makes,
# and the SQL tier works on it. The template is rendered here without Rails; the generator itself
# runs in a child Ruby (so Rails stays out of this process) where the bundle has railties.
class SqlGeneratorTest < Minitest::Test
  ROOT = File.expand_path("../..", __dir__)
  TEMPLATE = File.join(ROOT, "lib/generators/strata/sql/templates/create_strata_entries.rb.tt")

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  # What the template sees of the generator.
  TemplateContext = Struct.new(:migration_class_name, :table_name) do
    def render(template)
      ERB.new(template, trim_mode: "-").result(binding)
    end
  end

  def setup
    @dir = Strata::TestSupport.private_tmpdir
    Record.establish_connection(adapter: "sqlite3", database: File.join(@dir, "app.sqlite3"))
    @verbose = ActiveRecord::Migration.verbose
    ActiveRecord::Migration.verbose = false
  end

  def teardown
    ActiveRecord::Migration.verbose = @verbose
    Record.remove_connection
    FileUtils.remove_entry(@dir)
  end

  def test_the_migration_makes_the_schema_table_and_the_tier_works_on_it
    source = TemplateContext.new("CreateCacheRows", "cache_rows").render(File.read(TEMPLATE))
    migrate(source, "CreateCacheRows")
    Strata::Tiers::SQL.create_table!(Record, table_name: "schema_rows")

    ["", "_versions", "_log"].each do |suffix|
      assert_equal table_shape("schema_rows#{suffix}"), table_shape("cache_rows#{suffix}"), "the migration and Schema.create agree"
    end
    assert_tier_works_on("cache_rows")
  end

  def test_the_generator_writes_the_migration
    script = <<~RUBY
      require "generators/strata/sql/sql_generator"
      Strata::Generators::SqlGenerator.start(["--table-name=generated_rows", "--quiet"], destination_root: ARGV[0])
    RUBY
    assert system(RbConfig.ruby, "-I#{ROOT}/lib", "-e", script, @dir), "the generator ran"
    files = Dir[File.join(@dir, "db/migrate/*_create_generated_rows.rb")]
    assert_equal 1, files.size, "one migration in db/migrate"

    migrate(File.read(files.first), "CreateGeneratedRows")
    assert_tier_works_on("generated_rows")
  end

  private

  # Defines the migration class in a module of its own and runs it up on Record's database.
  def migrate(source, class_name)
    namespace = Module.new
    namespace.module_eval(source, "migration.rb")
    Record.connection_pool.with_connection { |c| namespace.const_get(class_name).new.exec_migration(c, :up) }
  end

  def table_shape(table)
    Record.connection_pool.with_connection do |c|
      columns = c.columns(table).map { |column| [column.name, column.sql_type, column.null, column.default] }
      indexes = c.indexes(table).map { |index| [index.columns, index.unique] }
      [columns, indexes, c.primary_keys(table)]
    end
  end

  def assert_tier_works_on(table)
    tier = Strata::Tiers::SQL.new(connection_class: Record, table_name: table, max_entries: 2, expire_every: 1, invalidation_log: true)
    assert tier.set("k", "\x00\xFF".b, ttl: 60)
    assert_equal "\x00\xFF".b, tier.get("k")
    refute tier.add("k", "v")
    assert tier.set_version(42, [7].pack("Q<"))
    assert_equal({42 => [7].pack("Q<")}, tier.get_versions([42]), "the versions table")
    assert_equal [[nil, "k"], [42, nil]], tier.log_after(0).map { |_, tag_id, key| [tag_id, key] }, "the log"
    %w[a b c].each { |key| tier.set(key, key) }
    assert_operator tier.stats[:entries], :<=, 3, "expiry runs on the table"
  end
end
