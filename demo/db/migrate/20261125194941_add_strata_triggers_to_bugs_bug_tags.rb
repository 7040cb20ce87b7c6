# frozen_string_literal: true

# Triggers that invalidate Strata's dependency tags when rows of these tables change by any SQL
# (docs/coherence.md, "Raw SQL"). For each row inserted, updated or deleted, the record tags of
# its old and new primary key ("bugs/42") and the table's collection tag ("bugs") get a fresh
# random version in strata_entries_versions and a row in strata_entries_log; on PostgreSQL
# the commit also wakes the pollers (pg_notify). A tag's id is the first 8 bytes of its SHA-256,
# little-endian, masked to 62 bits: Strata::Dependencies.tag_id.
#
# PostgreSQL (13 or later): the row triggers are deferred to the commit, so a version row stays
# locked only while the transaction commits; TRUNCATE changes the collection tag only.
# MySQL 8 and MariaDB 10.10 or later: three row triggers per table, run as each row changes; no
# notification (pollers find the log rows at their next poll).
# SQLite has no SHA-256 in SQL: its three row triggers per table append the tags as text to
# strata_entries_raw_tags (made here), and each host's poller turns them into versions and log
# rows (Strata::Tiers::SQL::RawTags). They are written with the change, so a rollback leaves none.
#
# CASCADES are the models' strata_cascade declarations when this was generated: a changed row of
# such a table also changes the rows its foreign keys point to (before and after, on a key
# change), and theirs, transitively, each row once (a recursive query, read as the row changes;
# on PostgreSQL at the commit). Regenerate after changing a strata_cascade.
class AddStrataTriggersToBugsBugTags < ActiveRecord::Migration[7.2]
  TABLES = ["bugs", "bug_tags"].freeze
  PRIMARY_KEY = "id"
  STRATA_TABLE = "strata_entries"
  RAW_TAGS = "#{STRATA_TABLE}_raw_tags"
  MASK = (1 << 62) - 1
  # table => {"primary_key" => column, "parents" => [{"column" => foreign key, "table" => parent
  # table}, or for a polymorphic belongs_to {"column", "type_column", "tables" => {type => table}}]}
  CASCADES = {
    "bug_tags" => {"primary_key" => "id", "parents" => [{"column" => "bug_id", "table" => "bugs"}]}
  }.freeze

  def up
    case database
    when :postgres
      execute postgres_functions
      TABLES.each { |table| postgres_triggers(table).each { |statement| execute statement } }
    when :mysql
      TABLES.each { |table| mysql_triggers(table).each { |statement| execute statement } }
    else
      execute sqlite_raw_tags
      TABLES.each { |table| sqlite_triggers(table).each { |statement| execute statement } }
    end
  end

  def down
    case database
    when :postgres
      TABLES.each do |table|
        execute "DROP TRIGGER IF EXISTS #{q(STRATA_TABLE)} ON #{q(table)}"
        execute "DROP TRIGGER IF EXISTS #{q("#{STRATA_TABLE}_truncate")} ON #{q(table)}"
      end
      # Other tables' triggers may still use the functions: they stay until the last goes.
      execute <<~SQL
        DO $$ BEGIN
          DROP FUNCTION IF EXISTS #{q("#{STRATA_TABLE}_changed")}();
          DROP FUNCTION IF EXISTS #{q("#{STRATA_TABLE}_tag_id")}(text);
        EXCEPTION WHEN dependent_objects_still_exist THEN NULL;
        END $$
      SQL
    else
      TABLES.each { |table| %w[insert update delete].each { |event| execute "DROP TRIGGER IF EXISTS #{q(row_trigger(table, event))}" } }
      # Other tables' triggers may still write the raw tags: the table stays until the last goes.
      execute "DROP TABLE IF EXISTS #{q(RAW_TAGS)}" if database == :sqlite && sqlite_raw_tag_triggers.zero?
    end
  end

  private

  def database
    case connection.adapter_name
    when /postg/i then :postgres
    when /mysql|trilogy/i then :mysql
    when /sqlite/i then :sqlite
    else raise NotImplementedError, "strata:triggers supports PostgreSQL, MySQL, MariaDB and SQLite, not #{connection.adapter_name}"
    end
  end

  def q(name)
    connection.quote_table_name(name)
  end

  # name in the schema the migration runs in: a function body finds its tables by the search_path
  # of the session that fires the trigger, which may be another.
  def qualified(name)
    @schema ||= connection.select_value("SELECT current_schema()")
    "#{q(@schema)}.#{q(name)}"
  end

  # <STRATA_TABLE>_tag_id(tag) is Strata::Dependencies.tag_id; <STRATA_TABLE>_changed() is the
  # trigger, given the tag prefix (the table name) and the primary key column. Tags are bumped
  # in tag id order, so two transactions bumping the same tags don't deadlock.
  def postgres_functions
    bytes = (0..6).map { |index| "(get_byte(digest, #{index})::bigint << #{index * 8})" }
    <<~SQL
      CREATE OR REPLACE FUNCTION #{q("#{STRATA_TABLE}_tag_id")}(tag text) RETURNS bigint
      LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
        SELECT #{bytes.join(" | ")} | ((get_byte(digest, 7) & 63)::bigint << 56)
        FROM (SELECT sha256(convert_to(tag, 'UTF8')) AS digest) AS hashed
      $$;

      CREATE OR REPLACE FUNCTION #{q("#{STRATA_TABLE}_changed")}() RETURNS trigger
      LANGUAGE plpgsql AS $$
      DECLARE
        prefix text := TG_ARGV[0];
        keys text[] := ARRAY[]::text[];
        old_row jsonb;
        new_row jsonb;
        parents text[] := ARRAY[]::text[];
        now_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
        id bigint;
      BEGIN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN old_row := to_jsonb(OLD); keys := keys || (old_row ->> TG_ARGV[1]); END IF;
        IF TG_OP IN ('UPDATE', 'INSERT') THEN new_row := to_jsonb(NEW); keys := keys || (new_row ->> TG_ARGV[1]); END IF;
        -- TG_ARGV[2], when given: the query of the cascades' tags, given the old and new row.
        IF TG_NARGS > 2 AND TG_OP <> 'TRUNCATE' THEN
          EXECUTE 'SELECT ARRAY(' || TG_ARGV[2] || ')' INTO parents USING old_row, new_row;
        END IF;
        FOR id IN
          SELECT DISTINCT #{qualified("#{STRATA_TABLE}_tag_id")}(tag) AS tag_id
          FROM unnest(array_append(ARRAY(SELECT prefix || '/' || key FROM unnest(keys) AS key WHERE key IS NOT NULL), prefix) || parents) AS tag
          ORDER BY tag_id
        LOOP
          INSERT INTO #{qualified("#{STRATA_TABLE}_versions")} (tag_id, version)
            VALUES (id, ('x' || substr(md5(gen_random_uuid()::text), 1, 16))::bit(64)::bigint & #{MASK})
            ON CONFLICT (tag_id) DO UPDATE SET version = EXCLUDED.version;
          INSERT INTO #{qualified("#{STRATA_TABLE}_log")} (created_at, tag_id) VALUES (now_ms, id);
        END LOOP;
        PERFORM pg_notify(#{connection.quote("#{STRATA_TABLE}_log")}, '');
        RETURN NULL;
      END $$;
    SQL
  end

  def postgres_triggers(table)
    arguments = "#{connection.quote(table)}, #{connection.quote(PRIMARY_KEY)}"
    cascade = cascade_tags(table, ->(column) { "($1 ->> #{connection.quote(column)})" }, ->(column) { "($2 ->> #{connection.quote(column)})" })
    arguments += ", #{connection.quote(cascade)}" if cascade
    [
      "DROP TRIGGER IF EXISTS #{q(STRATA_TABLE)} ON #{q(table)}",
      "CREATE CONSTRAINT TRIGGER #{q(STRATA_TABLE)} AFTER INSERT OR UPDATE OR DELETE ON #{q(table)} " \
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION #{q("#{STRATA_TABLE}_changed")}(#{arguments})",
      "DROP TRIGGER IF EXISTS #{q("#{STRATA_TABLE}_truncate")} ON #{q(table)}",
      "CREATE TRIGGER #{q("#{STRATA_TABLE}_truncate")} AFTER TRUNCATE ON #{q(table)} " \
        "FOR EACH STATEMENT EXECUTE FUNCTION #{q("#{STRATA_TABLE}_changed")}(#{arguments})"
    ]
  end

  # MySQL has no deferred triggers nor functions a migration can make without extra privileges:
  # each trigger computes the tag ids inline.
  def mysql_triggers(table)
    %w[insert update delete].flat_map do |event|
      keys = []
      keys << "OLD.#{q(PRIMARY_KEY)}" unless event == "insert"
      keys << "NEW.#{q(PRIMARY_KEY)}" unless event == "delete"
      tags = keys.map { |key| "CONCAT(#{connection.quote("#{table}/")}, #{key})" }
      tags << connection.quote(table)
      bumps = tags.each_with_index.map { |tag, index| mysql_bump(tag, (index == 1 && keys.size == 2) ? "#{keys[0]} <> #{keys[1]}" : nil) }
      if (cascade = cascade_tags(table, *row_columns(event)))
        bumps << mysql_bump_all(cascade)
      end
      [
        "DROP TRIGGER IF EXISTS #{q(row_trigger(table, event))}",
        "CREATE TRIGGER #{q(row_trigger(table, event))} AFTER #{event.upcase} ON #{q(table)} FOR EACH ROW BEGIN\n" \
          "DECLARE now_ms BIGINT DEFAULT FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000);\n#{bumps.join("\n")}\nEND"
      ]
    end
  end

  # Bumps the tag (an SQL expression) unless condition (SQL) is false.
  def mysql_bump(tag, condition)
    id = mysql_tag_id(tag)
    statements = "INSERT INTO #{q("#{STRATA_TABLE}_versions")} (tag_id, version) " \
      "VALUES (#{id}, CAST(CONV(HEX(RANDOM_BYTES(8)), 16, 10) AS UNSIGNED) & #{MASK}) " \
      "ON DUPLICATE KEY UPDATE version = VALUES(version);\n" \
      "INSERT INTO #{q("#{STRATA_TABLE}_log")} (created_at, tag_id) VALUES (now_ms, #{id});"
    condition ? "IF #{condition} THEN\n#{statements}\nEND IF;" : statements
  end

  # Bumps every tag the query (SELECT tag ...) gives.
  def mysql_bump_all(query)
    id = mysql_tag_id("cascaded.tag")
    "INSERT INTO #{q("#{STRATA_TABLE}_versions")} (tag_id, version) " \
      "SELECT #{id}, CAST(CONV(HEX(RANDOM_BYTES(8)), 16, 10) AS UNSIGNED) & #{MASK} FROM (#{query}) AS cascaded " \
      "ON DUPLICATE KEY UPDATE version = VALUES(version);\n" \
      "INSERT INTO #{q("#{STRATA_TABLE}_log")} (created_at, tag_id) SELECT now_ms, #{id} FROM (#{query}) AS cascaded;"
  end

  def mysql_tag_id(tag)
    "(CAST(CONV(HEX(REVERSE(UNHEX(LEFT(SHA2(CONVERT(#{tag} USING utf8mb4), 256), 16)))), 16, 10) AS UNSIGNED) & #{MASK})"
  end

  # [old, new]: a column of the row before and after a row trigger's event (MySQL, SQLite), nil
  # where the event has no such row.
  def row_columns(event)
    [("OLD" unless event == "insert"), ("NEW" unless event == "delete")].map do |row|
      row && ->(column) { "#{row}.#{q(column)}" }
    end
  end

  # The name of table's trigger on event (MySQL, SQLite).
  def row_trigger(table, event)
    "#{table}_#{STRATA_TABLE}_#{event}"[0, 64]
  end

  # The query (SELECT tag ...) of the tags of every row a change of a table's row reaches
  # through CASCADES, or nil when the table has none. old, new: a column's value in the row
  # before and after the change (SQL, given the column name), nil when there is no such row.
  # walk(tbl, k) starts at the rows the changed one points to and follows each reached table's
  # cascades; UNION keeps each row once, so loops end. A row's tags: its record tag (table,
  # slash, key) and its table's collection tag.
  def cascade_tags(table, old, new)
    return nil unless (own = CASCADES[table])

    starts = [old, new].compact.flat_map { |row| own["parents"].map { |parent| "SELECT #{parent_of(parent, row)}" } }
    steps = CASCADES.flat_map { |from, cascade| cascade["parents"].map { |parent| step(from, cascade["primary_key"], parent) } }
    walk = if database == :postgres
      # PostgreSQL's recursive part names walk once: the steps go in one LATERAL union.
      "#{starts.join(" UNION ")} UNION SELECT reached.tbl, reached.k FROM walk CROSS JOIN LATERAL (#{steps.join(" UNION ALL ")}) AS reached"
    else
      (starts + steps).join(" UNION ")
    end
    record_tag = (database == :mysql) ? "CONCAT(tbl, '/', k)" : "tbl || '/' || k"
    "WITH RECURSIVE walk (tbl, k) AS (#{walk}) " \
      "SELECT #{record_tag} AS tag FROM walk WHERE tbl IS NOT NULL AND k IS NOT NULL " \
      "UNION SELECT tbl FROM walk WHERE tbl IS NOT NULL AND k IS NOT NULL"
  end

  # "tbl, k" of the row parent (a CASCADES entry) points to from a row: value gives a column.
  def parent_of(parent, value)
    tbl = if parent["type_column"]
      arms = parent["tables"].map { |type, parent_table| "WHEN #{connection.quote(type)} THEN #{connection.quote(parent_table)}" }
      "CASE #{value.call(parent["type_column"])} #{arms.join(" ")} END"
    else
      connection.quote(parent["table"])
    end
    case database
    when :postgres then "(#{tbl})::text AS tbl, (#{value.call(parent["column"])})::text AS k"
    when :mysql then "CAST(#{tbl} AS CHAR(64)) AS tbl, CAST(#{value.call(parent["column"])} AS CHAR(255)) AS k"
    else "#{tbl} AS tbl, #{value.call(parent["column"])} AS k"
    end
  end

  # One step of the walk: from a reached row of table from (keyed by primary_key) to the row its
  # parent points to.
  def step(from, primary_key, parent)
    reached = parent_of(parent, ->(column) { "step_row.#{q(column)}" })
    key = "step_row.#{q(primary_key)} = #{walk_key(from, primary_key)}"
    if database == :postgres
      "SELECT #{reached} FROM #{qualified(from)} AS step_row WHERE walk.tbl = #{connection.quote(from)} AND #{key}"
    else
      "SELECT #{reached} FROM walk JOIN #{q(from)} AS step_row ON #{key} WHERE walk.tbl = #{connection.quote(from)}"
    end
  end

  # walk.k (text) as the type of from's primary key, so the lookup uses its index.
  def walk_key(from, primary_key)
    column = connection.columns(from).find { |candidate| candidate.name == primary_key }
    raise ArgumentError, "strata:triggers: #{from} has no column #{primary_key}" unless column

    case database
    when :postgres then "walk.k::#{column.sql_type}"
    when :mysql
      if column.type == :integer
        "CAST(walk.k AS #{column.sql_type.include?("unsigned") ? "UNSIGNED" : "SIGNED"})"
      else
        "CONVERT(walk.k USING #{column.collation.split("_").first}) COLLATE #{column.collation}"
      end
    else "walk.k"
    end
  end

  # The raw tags' table: the tier reads and deletes its rows in id order (Strata::Tiers::SQL::RawTags).
  def sqlite_raw_tags
    "CREATE TABLE IF NOT EXISTS #{q(RAW_TAGS)} (id INTEGER PRIMARY KEY NOT NULL, tag TEXT NOT NULL, created_at INTEGER NOT NULL)"
  end

  # Each trigger appends the record tags of the row's old and new primary key and the collection
  # tag, once each (UNION), with the time in ms; a NULL key makes no record tag.
  def sqlite_triggers(table)
    now = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
    %w[insert update delete].flat_map do |event|
      keys = []
      keys << "OLD.#{q(PRIMARY_KEY)}" unless event == "insert"
      keys << "NEW.#{q(PRIMARY_KEY)}" unless event == "delete"
      tags = keys.map { |key| "SELECT #{connection.quote("#{table}/")} || #{key} AS tag" } << "SELECT #{connection.quote(table)}"
      if (cascade = cascade_tags(table, *row_columns(event)))
        tags << "SELECT tag FROM (#{cascade})"
      end
      [
        "DROP TRIGGER IF EXISTS #{q(row_trigger(table, event))}",
        "CREATE TRIGGER #{q(row_trigger(table, event))} AFTER #{event.upcase} ON #{q(table)} FOR EACH ROW BEGIN\n" \
          "INSERT INTO #{q(RAW_TAGS)} (tag, created_at) SELECT tag, #{now} FROM (#{tags.join(" UNION ")}) WHERE tag IS NOT NULL;\nEND"
      ]
    end
  end

  # How many triggers on SQLite still write the raw tags.
  def sqlite_raw_tag_triggers
    connection.select_value("SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND sql LIKE #{connection.quote("%#{RAW_TAGS}%")}").to_i
  end
end
