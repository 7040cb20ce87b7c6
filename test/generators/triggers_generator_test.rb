# frozen_string_literal: true

require "test_helper"
require "pg"
require "rbconfig"
require "securerandom"
require "active_record"
require "strata/dependencies"
require "support/postgres_cluster"
require "support/mariadb_server"
require "support/invalidation_tables"
require "support/triggers_migration"

# The strata:triggers generator's migration (P5): a raw SQL change of a row, made over a plain
# connection, gives the row's record tag and its table's collection tag new versions in the
# versions table, writes them to the log and (PostgreSQL) notifies; the tag ids the database
# computes are Strata::Dependencies.tag_id's. The template is rendered here without Rails; the
# generator itself runs in a child Ruby.
module TriggerMigrationCase
  ROOT = File.expand_path("../..", __dir__)

  def setup
    @verbose = ActiveRecord::Migration.verbose
    ActiveRecord::Migration.verbose = false
  end

  def teardown
    ActiveRecord::Migration.verbose = @verbose
  end

  # Runs the migration for tables (rendered from the template) up or down on Record's database.
  def migrate(tables, direction = :up, strata_table: @strata, cascades: {})
    migration = Strata::TestSupport::TriggersMigration.triggers_migration(tables, table_name: strata_table, cascades: cascades)
    self.class::Record.connection_pool.with_connection { |c| migration.new.exec_migration(c, direction) }
  end

  def id(tag)
    Strata::Dependencies.tag_id(tag)
  end

  # tag_id => version in the versions table.
  def versions
    with_connection { |c| c.select_rows("SELECT tag_id, version FROM #{c.quote_table_name("#{@strata}_versions")}").to_h }
  end

  # The tag ids of the log rows, in order.
  def logged
    with_connection { |c| c.select_values("SELECT tag_id FROM #{c.quote_table_name("#{@strata}_log")} ORDER BY id") }
  end

  def with_connection(&)
    self.class::Record.connection_pool.with_connection(&)
  end

  # Runs sql on a plain connection (no Active Record), as psql or another program would.
  def raw(sql)
    connection = plain_connection
    sql.split(";\n").each { |statement| connection.query(statement) }
  ensure
    connection&.close
  end

  # The changes of one raw statement: the tags that got new versions, and the tags logged.
  def changes_of(sql)
    before = versions
    logged_before = logged.size
    raw(sql)
    after = versions
    [after.keys.select { |tag_id| before[tag_id] != after[tag_id] }.sort, logged.drop(logged_before).sort]
  end

  def assert_changed(tags, changes, message = nil)
    expected = tags.map { |tag| id(tag) }.sort
    assert_equal expected, changes[0], "#{message}: new versions for #{tags}"
    assert_equal expected, changes[1], "#{message}: log rows for #{tags}"
  end

  def assert_versions_are_62_bit
    versions.each_value { |version| assert_operator version, :<, 1 << 62 }
  end

  # A child (bug_tags), its parent (bugs) and grandparent (projects), a loop (a bug points to
  # its parent bug, which points back) and a polymorphic parent (notes), as strata_cascade
  # declares them: the name of each table in this test is t(name).
  def create_cascade_tables
    columns = {
      "projects" => "id BIGINT PRIMARY KEY, title VARCHAR(50)",
      "bugs" => "id BIGINT PRIMARY KEY, project_id BIGINT, parent_id BIGINT",
      "bug_tags" => "id BIGINT PRIMARY KEY, bug_id BIGINT, name VARCHAR(50)",
      "notes" => "id BIGINT PRIMARY KEY, notable_type VARCHAR(50), notable_id BIGINT"
    }
    with_connection do |c|
      columns.each { |table, sql| c.execute("CREATE TABLE #{c.quote_table_name(t(table))} (#{sql})") }
      c.execute("INSERT INTO #{c.quote_table_name(t("projects"))} VALUES (1, 'p')")
      c.execute("INSERT INTO #{c.quote_table_name(t("bugs"))} VALUES (42, 1, 43), (43, 1, 42), (44, NULL, NULL)")
      c.execute("INSERT INTO #{c.quote_table_name(t("bug_tags"))} VALUES (5, 43, 'crash')")
    end
    {
      t("bug_tags") => {"primary_key" => "id", "parents" => [{"column" => "bug_id", "table" => t("bugs")}]},
      t("bugs") => {"primary_key" => "id", "parents" => [{"column" => "project_id", "table" => t("projects")}, {"column" => "parent_id", "table" => t("bugs")}]},
      t("notes") => {"primary_key" => "id", "parents" => [
        {"column" => "notable_id", "type_column" => "notable_type", "tables" => {"Bug" => t("bugs"), "Project" => t("projects")}}
      ]}
    }
  end

  def t(table)
    "cascade_#{table}"
  end

  # tags with each table name made this test's.
  def tags_of(*tags)
    tags.uniq.map { |tag| tag.sub(/\A[a-z_]+/) { |table| t(table) } }
  end

  def test_p12_a_raw_change_of_a_cascading_row_changes_its_parents_transitively
    cascades = create_cascade_tables
    migrate([t("bug_tags"), t("notes"), t("bugs")], cascades: cascades)
    bug_tags = quoted("bug_tags")
    notes = quoted("notes")
    family = %w[bugs/42 bugs/43 bugs projects/1 projects]

    assert_changed(tags_of("bug_tags/5", "bug_tags", *family), changes_of("UPDATE #{bug_tags} SET name = 'hang' WHERE id = 5"),
      "the tag's bug, its project, and the bug it points to, which points back")
    assert_changed(tags_of("bug_tags/5", "bug_tags", *family, "bugs/44"), changes_of("UPDATE #{bug_tags} SET bug_id = 44 WHERE id = 5"),
      "a moved tag: its bug before and after")
    assert_changed(tags_of("bug_tags/6", "bug_tags"), changes_of("INSERT INTO #{bug_tags} VALUES (6, NULL, 'orphan')"), "no parent")
    assert_changed(tags_of("bugs/44", "bugs", "projects/1", "projects"), changes_of("UPDATE #{quoted("bugs")} SET project_id = 1 WHERE id = 44"),
      "a parent with cascades of its own")
    assert_changed(tags_of("notes/9", "notes", "projects/1", "projects"), changes_of("INSERT INTO #{notes} VALUES (9, 'Project', 1)"),
      "polymorphic")
    assert_changed(tags_of("notes/9", "notes", "projects/1", "projects", *family), changes_of("UPDATE #{notes} SET notable_type = 'Bug', notable_id = 42 WHERE id = 9"),
      "polymorphic, moved to another type")
    assert_changed(tags_of("notes/9", "notes", *family), changes_of("UPDATE #{notes} SET notable_type = 'Unknown' WHERE id = 9"),
      "to a type no model has")
    assert_changed(tags_of("notes/9", "notes"), changes_of("DELETE FROM #{notes} WHERE id = 9"), "a type no model has")
    assert_changed(tags_of("bug_tags/5", "bug_tags", "bugs/44", "bugs", "projects/1", "projects"), changes_of("DELETE FROM #{bug_tags} WHERE id = 5"),
      "a delete")
    assert_versions_are_62_bit
  end

  def quoted(table)
    with_connection { |c| c.quote_table_name(t(table)) }
  end
end

class TriggersGeneratorPostgresTest < Minitest::Test
  include TriggerMigrationCase

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  # Each test in a schema of its own on the shared server: its bugs table is "bugs".
  def setup
    super
    @schema = "strata_trg_#{SecureRandom.hex(4)}"
    @strata = "strata_entries"
    Record.establish_connection("#{Strata::TestSupport::PostgresCluster.url}?min_messages=warning")
    with_connection do |c|
      c.execute("CREATE SCHEMA #{@schema}")
      c.schema_search_path = @schema
      Strata::TestSupport::InvalidationTables.create(c, @strata)
      c.execute("CREATE TABLE bugs (id bigint PRIMARY KEY, title text)")
      c.execute("CREATE TABLE \"バグ\" (id bigint PRIMARY KEY, title text)")
      c.execute("INSERT INTO bugs VALUES (42, 'crash'), (7, 'hang')")
      c.execute("INSERT INTO \"バグ\" VALUES (1, 'x')")
    end
  end

  def teardown
    with_connection { |c| c.execute("DROP SCHEMA IF EXISTS #{@schema} CASCADE") }
    Record.remove_connection
    super
  end

  def plain_connection
    connection = PG.connect(Strata::TestSupport::PostgresCluster.url)
    connection.exec("SET search_path TO #{@schema}")
    connection
  end

  def test_the_tag_id_function_is_strata_dependencies_tag_id
    migrate(%w[bugs])
    tags = ["bugs/42", "bugs", "バグ/1", "bügs/-1", "projects/7", "", "x" * 300, "a/\u{1F600}"]
    with_connection do |c|
      tags.each do |tag|
        assert_equal id(tag), c.select_value("SELECT strata_entries_tag_id(#{c.quote(tag)})"), tag.inspect
      end
    end
  end

  def test_p5_a_raw_update_bumps_the_record_and_the_collection_logs_and_notifies
    migrate(%w[bugs])
    listener = plain_connection
    listener.exec("LISTEN strata_entries_log")

    assert_changed(%w[bugs/42 bugs], changes_of("UPDATE bugs SET title = 'crash on start' WHERE id = 42"), "update")
    assert listener.wait_for_notify(10) { |channel| assert_equal "strata_entries_log", channel }, "notified"
    assert_changed(%w[bugs/42 bugs], changes_of("UPDATE bugs SET title = 'again' WHERE id = 42"), "a second update, new versions again")
    assert_changed(%w[bugs/8 bugs], changes_of("INSERT INTO bugs VALUES (8, 'new')"), "insert")
    assert_changed(%w[bugs/7 bugs/70 bugs], changes_of("UPDATE bugs SET id = 70 WHERE id = 7"), "a key change: old and new")
    assert_changed(%w[bugs/8 bugs], changes_of("DELETE FROM bugs WHERE id = 8"), "delete")
    assert_changed(%w[bugs], changes_of("TRUNCATE bugs"), "truncate: the collection")
    assert_versions_are_62_bit
  ensure
    listener&.close
  end

  def test_p5_a_session_with_another_search_path
    migrate(%w[bugs])
    connection = PG.connect(Strata::TestSupport::PostgresCluster.url)
    before = versions
    connection.exec("UPDATE #{@schema}.bugs SET title = 'y' WHERE id = 42")
    assert_equal [id("bugs"), id("bugs/42")].sort, versions.keys.select { |tag_id| before[tag_id] != versions[tag_id] }.sort
  ensure
    connection&.close
  end

  def test_p5_a_utf8_table_name
    migrate(%w[バグ])
    assert_changed(%w[バグ/1 バグ], changes_of("UPDATE \"バグ\" SET title = 'y' WHERE id = 1"))
  end

  def test_the_versions_change_when_the_transaction_commits_and_not_on_rollback
    migrate(%w[bugs])
    connection = plain_connection
    before = versions
    connection.exec("BEGIN")
    connection.exec("UPDATE bugs SET title = 'y' WHERE id = 42")
    assert_equal before, versions, "deferred to the commit"
    connection.exec("ROLLBACK")
    assert_equal before, versions, "a rollback bumps nothing"
    assert_empty logged

    connection.exec("BEGIN")
    connection.exec("UPDATE bugs SET title = 'y' WHERE id = 42")
    connection.exec("UPDATE bugs SET title = 'z' WHERE id = 42")
    connection.exec("COMMIT")
    refute_equal before, versions
  ensure
    connection&.close
  end

  def test_down_removes_the_triggers_and_keeps_functions_other_tables_use
    migrate(%w[bugs])
    migrate(%w[バグ])
    migrate(%w[バグ], :down)
    assert_equal [[], []], changes_of("UPDATE \"バグ\" SET title = 'y' WHERE id = 1"), "no trigger on バグ"
    assert_changed(%w[bugs/42 bugs], changes_of("UPDATE bugs SET title = 'y' WHERE id = 42"), "bugs still has its own")

    migrate(%w[bugs], :down)
    assert_equal [[], []], changes_of("UPDATE bugs SET title = 'z' WHERE id = 42")
    functions = with_connection { |c| c.select_values("SELECT proname FROM pg_proc JOIN pg_namespace n ON n.oid = pronamespace WHERE nspname = #{c.quote(@schema)}") }
    assert_empty functions, "the last down drops the functions"
  end
end

class TriggersGeneratorMariaDBTest < Minitest::Test
  include TriggerMigrationCase

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  # Tables of the test's own in the shared database.
  def setup
    super
    suffix = @suffix = SecureRandom.hex(4)
    @strata = "strata_trg_#{suffix}"
    @bugs = "bugs_#{suffix}"
    @utf8 = "バグ_#{suffix}"
    Record.establish_connection(Strata::TestSupport::MariaDBServer.url)
    with_connection do |c|
      Strata::TestSupport::InvalidationTables.create(c, @strata)
      [@bugs, @utf8].each do |table|
        c.execute("CREATE TABLE #{c.quote_table_name(table)} (id BIGINT PRIMARY KEY, title VARCHAR(100)) DEFAULT CHARSET utf8mb4")
      end
      c.execute("INSERT INTO #{c.quote_table_name(@bugs)} VALUES (42, 'crash'), (7, 'hang')")
      c.execute("INSERT INTO #{c.quote_table_name(@utf8)} VALUES (1, 'x')")
    end
  end

  def teardown
    with_connection do |c|
      [@bugs, @utf8, *%w[projects bugs bug_tags notes].map { |table| t(table) }].each { |table| c.execute("DROP TABLE IF EXISTS #{c.quote_table_name(table)}") }
      Strata::TestSupport::InvalidationTables.drop(c, @strata)
    end
    Record.remove_connection
    super
  end

  def t(table)
    "cascade_#{table}_#{@suffix}"
  end

  def plain_connection
    url = URI(Strata::TestSupport::MariaDBServer.url)
    Trilogy.new(host: url.host, port: url.port, username: url.user, database: url.path.delete_prefix("/"), encoding: "utf8mb4")
  end

  def test_p5_a_raw_update_bumps_the_record_and_the_collection_and_logs
    migrate([@bugs])
    bugs = "`#{@bugs}`"
    assert_changed(%W[#{@bugs}/42 #{@bugs}], changes_of("UPDATE #{bugs} SET title = 'crash on start' WHERE id = 42"), "update")
    assert_changed(%W[#{@bugs}/42 #{@bugs}], changes_of("UPDATE #{bugs} SET title = 'again' WHERE id = 42"), "again")
    assert_changed(%W[#{@bugs}/8 #{@bugs}], changes_of("INSERT INTO #{bugs} VALUES (8, 'new')"), "insert")
    assert_changed(%W[#{@bugs}/7 #{@bugs}/70 #{@bugs}], changes_of("UPDATE #{bugs} SET id = 70 WHERE id = 7"), "a key change")
    assert_changed(%W[#{@bugs}/8 #{@bugs}], changes_of("DELETE FROM #{bugs} WHERE id = 8"), "delete")
    assert_versions_are_62_bit
  end

  def test_p5_a_utf8_table_name_and_the_tag_ids_are_strata_dependencies_tag_id
    migrate([@utf8])
    assert_changed(%W[#{@utf8}/1 #{@utf8}], changes_of("UPDATE `#{@utf8}` SET title = 'y' WHERE id = 1"))
  end

  def test_a_rollback_bumps_nothing
    migrate([@bugs])
    connection = plain_connection
    connection.query("BEGIN")
    connection.query("UPDATE `#{@bugs}` SET title = 'y' WHERE id = 42")
    connection.query("ROLLBACK")
    assert_empty versions
    assert_empty logged
  ensure
    connection&.close
  end

  def test_down_removes_the_triggers
    migrate([@bugs])
    migrate([@bugs], :down)
    assert_equal [[], []], changes_of("UPDATE `#{@bugs}` SET title = 'y' WHERE id = 42")
  end
end

# SQLite: the triggers append the tags as text to strata_entries_raw_tags; the SQL tier's
# apply_raw_tags (which each host's poller calls every round) turns them into versions and log
# rows. Changes are made with the sqlite3 command-line shell, as a person or a script would.
class TriggersGeneratorSQLiteTest < Minitest::Test
  include TriggerMigrationCase

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def run
    Strata::TestSupport.with_tmpdir do |dir|
      @path = File.join(dir, "app.sqlite3")
      super
    end
  end

  def setup
    super
    @strata = "strata_entries"
    Record.establish_connection(adapter: "sqlite3", database: @path)
    with_connection do |c|
      Strata::TestSupport::InvalidationTables.create(c, @strata)
      c.execute("CREATE TABLE bugs (id INTEGER PRIMARY KEY, title TEXT)")
      c.execute("CREATE TABLE \"バグ\" (id INTEGER PRIMARY KEY, title TEXT)")
      c.execute("INSERT INTO bugs VALUES (42, 'crash'), (7, 'hang')")
      c.execute("INSERT INTO \"バグ\" VALUES (1, 'x')")
    end
    @tier = Strata::Tiers::SQL.new(connection_class: Record)
  end

  def teardown
    Record.remove_connection
    super
  end

  # Runs sql in the sqlite3 shell, then converts the raw tags as a poller's round does.
  def raw(sql)
    sqlite3(sql)
    @tier.apply_raw_tags
  end

  def sqlite3(sql)
    assert system("sqlite3", "-bail", @path, sql, out: File::NULL), "sqlite3 ran #{sql}"
  end

  # The tags the triggers appended and no poller has converted yet.
  def raw_tags
    with_connection { |c| c.select_values("SELECT tag FROM strata_entries_raw_tags ORDER BY id") }
  end

  def test_p5_a_raw_update_appends_the_tags_as_text_and_the_tier_turns_them_into_invalidations
    migrate(%w[bugs])
    sqlite3("UPDATE bugs SET title = 'crash on start' WHERE id = 42")
    assert_equal %w[bugs/42 bugs].sort, raw_tags.sort
    assert_empty versions, "nothing bumped until a poller converts them"

    assert_equal [id("bugs"), id("bugs/42")].sort, @tier.apply_raw_tags
    assert_empty raw_tags, "the rows converted are gone"
    assert_equal [id("bugs"), id("bugs/42")].sort, versions.keys.sort
    assert_equal [id("bugs"), id("bugs/42")].sort, logged.sort
    assert_empty @tier.apply_raw_tags, "an idle round converts nothing"
  end

  def test_p5_a_raw_update_bumps_the_record_and_the_collection_and_logs
    migrate(%w[bugs])
    assert_changed(%w[bugs/42 bugs], changes_of("UPDATE bugs SET title = 'crash on start' WHERE id = 42"), "update")
    assert_changed(%w[bugs/42 bugs], changes_of("UPDATE bugs SET title = 'again' WHERE id = 42"), "again")
    assert_changed(%w[bugs/8 bugs], changes_of("INSERT INTO bugs VALUES (8, 'new')"), "insert")
    assert_changed(%w[bugs/7 bugs/70 bugs], changes_of("UPDATE bugs SET id = 70 WHERE id = 7"), "a key change: old and new")
    assert_changed(%w[bugs/8 bugs], changes_of("DELETE FROM bugs WHERE id = 8"), "delete")
    assert_changed(%w[bugs/42 bugs/70 bugs], changes_of("UPDATE bugs SET title = 'all'"), "many rows: each tag once")
    assert_versions_are_62_bit
  end

  def test_p5_a_utf8_table_name
    migrate(%w[バグ])
    assert_changed(%w[バグ/1 バグ], changes_of("UPDATE \"バグ\" SET title = 'y' WHERE id = 1"))
  end

  def test_a_rollback_appends_nothing
    migrate(%w[bugs])
    sqlite3("BEGIN; UPDATE bugs SET title = 'y' WHERE id = 42; ROLLBACK;")
    assert_empty raw_tags
    assert_empty @tier.apply_raw_tags
    assert_empty versions
  end

  def test_down_removes_the_triggers_and_the_raw_tags_table_with_the_last
    migrate(%w[bugs])
    migrate(%w[バグ])
    migrate(%w[バグ], :down)
    assert_equal [[], []], changes_of("UPDATE \"バグ\" SET title = 'y' WHERE id = 1"), "no trigger on バグ"
    assert_changed(%w[bugs/42 bugs], changes_of("UPDATE bugs SET title = 'y' WHERE id = 42"), "bugs still has its own")

    migrate(%w[bugs], :down)
    refute with_connection { |c| c.table_exists?("strata_entries_raw_tags") }, "the last down drops the table"
    assert_empty @tier.apply_raw_tags, "a tier that saw the table carries on without it"
  end
end

class TriggersGeneratorTest < Minitest::Test
  ROOT = TriggerMigrationCase::ROOT

  def test_the_generator_writes_the_migration
    Strata::TestSupport.with_tmpdir do |dir|
      script = <<~RUBY
        require "generators/strata/triggers/triggers_generator"
        Strata::Generators::TriggersGenerator.start(["bugs", "bug_tags", "--table-name=cache_rows", "--quiet"], destination_root: ARGV[0])
      RUBY
      assert system(RbConfig.ruby, "-I#{ROOT}/lib", "-e", script, dir), "the generator ran"
      files = Dir[File.join(dir, "db/migrate/*_add_strata_triggers_to_bugs_bug_tags.rb")]
      assert_equal 1, files.size, "one migration in db/migrate"
      source = File.read(files.first)
      assert_includes source, "class AddStrataTriggersToBugsBugTags < ActiveRecord::Migration["
      assert_includes source, 'TABLES = ["bugs", "bug_tags"].freeze'
      assert_includes source, 'STRATA_TABLE = "cache_rows"'

      refute system(RbConfig.ruby, "-I#{ROOT}/lib", "-e", script.sub('"bug_tags"', '"bug;tags"'), dir, err: File::NULL),
        "a name that is not an identifier is refused"
    end
  end

  # The app's strata_cascade declarations go into the migration: those reachable from the tables
  # named (the child's parent and its parent; any model may be a polymorphic parent).
  def test_the_generator_writes_the_models_cascades
    Strata::TestSupport.with_tmpdir do |dir|
      script = <<~RUBY
        require "active_record"
        require "strata/model"
        require "generators/strata/triggers/triggers_generator"
        ActiveRecord::Base.establish_connection(adapter: "sqlite3", database: ":memory:")
        %w[projects bugs bug_tags notes others].each do |table|
          ActiveRecord::Base.connection.execute("CREATE TABLE \#{table} (id INTEGER PRIMARY KEY, project_id INTEGER, bug_id INTEGER, notable_type TEXT, notable_id INTEGER)")
        end
        class Project < ActiveRecord::Base; include Strata::Model; end
        class Bug < ActiveRecord::Base; include Strata::Model; belongs_to :project; strata_cascade :project; end
        class BugTag < ActiveRecord::Base; include Strata::Model; belongs_to :bug; strata_cascade :bug; end
        class Note < ActiveRecord::Base; include Strata::Model; belongs_to :notable, polymorphic: true; strata_cascade :notable; end
        class Other < ActiveRecord::Base; include Strata::Model; belongs_to :bug; strata_cascade :bug; end
        Strata::Generators::TriggersGenerator.start(["bug_tags", "notes", "--quiet"], destination_root: ARGV[0])
      RUBY
      assert system(RbConfig.ruby, "-I#{ROOT}/lib", "-e", script, dir), "the generator ran"
      source = File.read(Dir[File.join(dir, "db/migrate/*_add_strata_triggers_to_bug_tags_notes.rb")].first)
      namespace = Module.new
      namespace.module_eval(source)
      models = {"Bug" => "bugs", "BugTag" => "bug_tags", "Note" => "notes", "Other" => "others", "Project" => "projects"}
      expected = {
        "bug_tags" => {"primary_key" => "id", "parents" => [{"column" => "bug_id", "table" => "bugs"}]},
        "bugs" => {"primary_key" => "id", "parents" => [{"column" => "project_id", "table" => "projects"}]},
        "notes" => {"primary_key" => "id", "parents" => [{"column" => "notable_id", "type_column" => "notable_type", "tables" => models}]},
        "others" => {"primary_key" => "id", "parents" => [{"column" => "bug_id", "table" => "bugs"}]} # a note's parent may be an Other
      }
      assert_equal expected, namespace::AddStrataTriggersToBugTagsNotes::CASCADES
    end
  end
end
