# frozen_string_literal: true

require "test_helper"
require "json"
require "open3"
require "rbconfig"
require "securerandom"
require "socket"
require "yaml"
require "active_support"
require "active_support/cache/strata_store"
require "strata/cli/l1_table"
require "support/child_processes"

# exe/strata stats, run as a child process against a real L1 file, real memcached servers and
# an SQLite file that a store wrote to first: the figures it prints are the ones written.
class StatsCommandTest < Minitest::Test
  include Strata::TestSupport
  include Strata::TestSupport::TrackedChildren

  ROOT = File.expand_path("../..", __dir__)
  EXE = File.join(ROOT, "exe", "strata")
  TABLE_SIZE = 4 << 20
  DEADLINE = 30.0 # seconds for a child to finish

  def setup
    @dir = private_tmpdir
    @l1_path = File.join(@dir, "app.l1")
    @sqlite_path = File.join(@dir, "cache.sqlite3")
    @stores = []
    @pids = []
  end

  def teardown
    kill_tracked_children
    @stores.each(&:close)
    FileUtils.remove_entry(@dir) if @dir && File.exist?(@dir)
  end

  def test_an_l1_file_shows_its_geometry_and_the_entries_a_store_wrote
    store = new_store(l1: {path: @l1_path, size: TABLE_SIZE})
    4.times { |i| store.write("key-#{i}", "value #{i}") }
    before = File.stat(@l1_path)

    l1 = stats_json(@l1_path)[:l1]

    assert_equal 4, l1[:entries]
    assert_equal TABLE_SIZE, l1[:size]
    assert_equal [@l1_path, 8, 65_536], l1.values_at(:path, :shards, :segment_size)
    assert_in_delta 4.0 / l1[:slots], l1[:slot_fill], 0.0001
    after = File.stat(@l1_path)
    assert_equal [before.ino, before.mtime], [after.ino, after.mtime], "the table was rebuilt"
    assert_equal "value 3", store.read("key-3")
  end

  # Two app processes, each with its own store on the same L1 file and SQLite file: the figures
  # count both's writes.
  # Enough writes to go round a one-shard table's ring of small segments: every segment is in
  # use and began to be written while the test wrote; a start zeroed in the file (as an earlier
  # build of the layout left it) is counted as unknown, not as an age.
  def test_segment_ages_cover_the_segments_written
    table = Strata::Tiers::SharedMemory.new(path: @l1_path, size: 1 << 20, shards: 1, segment_size: 4096, memo_size: 0)
    began = Time.now
    300.times { |i| assert table.set("age-#{i}", "v" * 4000) }
    per_shard = table.stats[:segments_per_shard]
    table.close

    l1 = stats_json(@l1_path)[:l1]
    elapsed = Time.now - began

    ages = l1[:segments]
    assert_equal [per_shard, 0], ages.values_at(:in_use, :unknown)
    oldest, median, newest = ages.values_at(:oldest, :median, :newest)
    assert_operator newest, :>=, 0
    assert_operator median, :>=, newest
    assert_operator oldest, :>=, median
    assert_operator oldest, :<=, elapsed + 0.001
    assert_equal [oldest], ages[:shard_oldest]

    zero_segment_start(0)
    out, err, status = run_stats(@l1_path)
    assert status.success?, err
    line = out.lines.find { |l| l.include?("segment ages") }
    assert_match(/\Al1\s+segment ages\s+oldest=[\d.]+s median=[\d.]+s newest=[\d.]+s in_use=#{per_shard} unknown=1$/, line)
  end

  def test_two_processes_writes_add_up
    config = config_file("two.yml", l1: {path: @l1_path, size: TABLE_SIZE}, sql: {path: @sqlite_path})
    pids = 2.times.map do |n|
      fork_tracked do
        store = ActiveSupport::Cache::StrataStore.new(l1: {path: @l1_path, size: TABLE_SIZE}, sql: {path: @sqlite_path})
        written = 3.times.all? { |i| store.write("child-#{n}-#{i}", "value") }
        store.close
        written
      end
    end
    assert_equal [0, 0], pids.map { |pid| reap_child(pid)&.exitstatus }
    new_store(l1: {path: @l1_path, size: TABLE_SIZE}, sql: {path: @sqlite_path}).write("parent", "p")

    figures = stats_json("--config", config)

    assert_equal [7, 7], [figures[:l1][:entries], figures[:sql][:rows]]
  end

  def test_a_yaml_config_shows_memcached_servers_and_the_sql_table
    servers = memcached_servers
    down = closed_port_server
    store = new_store(memcached: {servers: servers}, sql: {path: @sqlite_path})
    store.write("probe", "x")
    5.times { |i| store.write("yaml-#{i}", "value #{i}") }
    store.delete("yaml-0")
    config = config_file("store.yml", memcached: {servers: servers + [down]}, sql: {path: @sqlite_path})

    figures = stats_json("--config", config)

    refute figures.key?(:l1), "a store with memcached and SQL has no L1 unless l1: is given"
    up = figures[:memcached].first(servers.size)
    assert_equal ["up"] * servers.size, up.map { |server| server[:state] }
    # At least the 5 keys left: the servers are shared with other tests, whose expiring items
    # memcached reclaims at any time, so a count taken before would not hold.
    assert_operator up.sum { |server| server[:curr_items] }, :>=, 5
    assert_equal [down, "unreachable"], figures[:memcached].last.values_at(:server, :state)
    sql = figures[:sql]
    assert_equal [6, 1, 0, 0, 0], sql.values_at(:rows, :tombstones, :log_rows, :log_head, :versions_rows)
    assert_equal "sqlite3:#{@sqlite_path}", sql[:source]
    assert_operator sql[:bytes], :>, 0
  end

  # An app process whose store marked a memcached server down (its connection refused): `strata
  # stats`, another process, shows since when and which process, while that process lives; the
  # record of a process that died is not shown.
  def test_a_server_an_app_process_marked_down_is_shown_with_since_when
    down = closed_port_server
    options = {l1: {path: @l1_path, size: TABLE_SIZE}, memcached: {servers: [down], connect_timeout: 0.2, retry_after: 600}}
    config = config_file("down.yml", options)
    ready, done = IO.pipe
    hold, release = IO.pipe
    child = fork_tracked do
      ready.close
      release.close
      store = ActiveSupport::Cache::StrataStore.new(namespace: "stats-#{SecureRandom.hex(4)}", **options)
      store.read("k") # refused: the server is marked down
      since = store.stack[:l2].client.stats[:down_since].fetch(down)
      done.write(since.to_r.floor(3).to_s)
      done.close
      hold.read # until killed: the store open, the server down for it
    end
    done.close
    hold.close
    since = Rational(ready.read)

    server = stats_json("--config", config)[:memcached].first
    assert_equal [down, "unreachable"], server.values_at(:server, :state)
    assert_equal [Time.at(since).utc.iso8601(3), child], server.values_at(:down_since, :down_marked_by)
    out, err, status = run_stats("--config", config)
    assert status.success?, err
    assert_match(/^l2 +#{Regexp.escape(down)} +unreachable: .*; down since \S+ \(marked by process #{child} on this host\)$/, out)

    kill_and_reap(child, DEADLINE)
    @pids.delete(child)
    server = stats_json("--config", config)[:memcached].first
    refute server.key?(:down_since), "the process that marked it is gone"
  ensure
    [ready, done, hold, release].each { |io| io&.close unless io&.closed? }
  end

  # The SQL tier's expiry passes, counted by an app process that has an L1 table, as the
  # host's: `strata stats` shows what that process's own tier counted (passes, rows expired,
  # rows evicted to keep within max_entries).
  def test_the_sql_tiers_expiry_passes_are_shown
    sql = {path: @sqlite_path, expire_every: 2, expiry_batch_size: 10, max_entries: 4}
    reader, writer = IO.pipe
    child = fork_tracked do
      reader.close
      store = ActiveSupport::Cache::StrataStore.new(l1: {path: @l1_path, size: TABLE_SIZE}, sql: sql)
      tier = store.stack[:l3]
      2.times { |i| tier.set("gone-#{i}", "v", ttl: -1) } # expired at once: the next pass deletes them
      8.times { |i| store.write("kept-#{i}", "value #{i}") }
      writer.write(JSON.generate(tier.stats.slice(:expiry_passes, :expired, :evicted)))
      writer.close
      store.close
      true
    end
    writer.close
    counted = JSON.parse(reader.read, symbolize_names: true)
    assert_equal 0, reap_child(child)&.exitstatus
    assert_operator counted[:expiry_passes], :>, 0
    assert_equal 2, counted[:expired]
    assert_operator counted[:evicted], :>, 0
    config = config_file("expiry.yml", l1: {path: @l1_path, size: TABLE_SIZE}, sql: {path: @sqlite_path})

    counters = stats_json("--config", config)[:sql][:counters]

    assert_equal counted.values, counters.values_at(:expiry_passes, :expired, :evictions)
    out, err, status = run_stats("--config", config)
    assert status.success?, err
    assert_match(/^l3 +expiry +passes=#{counted[:expiry_passes]} expired=2 evicted=#{counted[:evicted]}$/, out)
  ensure
    [reader, writer].each { |io| io&.close unless io&.closed? }
  end

  def test_a_ruby_config_prints_a_table
    store = new_store(l1: {path: @l1_path, size: TABLE_SIZE}, sql: {path: @sqlite_path})
    3.times { |i| store.write("rb-#{i}", "value #{i}") }
    config = File.join(@dir, "cache.rb")
    File.write(config, "{l1: {path: #{@l1_path.dump}, size: #{TABLE_SIZE}}, sql: {path: #{@sqlite_path.dump}}}\n")

    out, err, status = run_stats("--config", config)

    assert status.success?, err
    l1_line = out.lines.find { |line| line.start_with?("l1 ") }
    l3_line = out.lines.find { |line| line.start_with?("l3 ") }
    assert_match(/\bentries=3 slots=\d+/, l1_line)
    assert_match(/\brows=3 bytes=\d+ tombstones=0 /, l3_line)
  end

  def test_watch_refreshes_count_times
    new_store(l1: {path: @l1_path, size: TABLE_SIZE}).write("w", "1")

    out, err, status = run_stats("--watch", "--count", "3", "--interval", "0", "--json", @l1_path)

    assert status.success?, err
    snapshots = out.lines.map { |line| JSON.parse(line, symbolize_names: true) }
    assert_equal [1, 1, 1], snapshots.map { |snapshot| snapshot[:l1][:entries] }
  end

  # Nothing could be read: the error is shown, and the exit status is 1.
  def test_a_file_that_is_not_a_table_is_reported_and_left_alone
    File.write(@l1_path, "not a table")

    out, _err, status = run_stats("--json", @l1_path)

    assert_equal 1, status.exitstatus, "no tier could be read"
    assert_match(/not a Strata L1 table/, JSON.parse(out, symbolize_names: true)[:l1][:error])
    assert_equal "not a table", File.read(@l1_path)
  end

  # A config file's relative paths are its directory's, whatever the current directory; run
  # without Bundler or -I, exe/strata finds its own lib.
  def test_a_configs_relative_paths_are_its_own_directorys_and_the_exe_finds_its_lib
    new_store(sql: {path: @sqlite_path}).write("k", "v")
    Dir.mkdir(File.join(@dir, "config"))
    config = File.join(@dir, "config", "strata.yml")
    File.write(config, {"sql" => {"path" => "../cache.sqlite3"}}.to_yaml)

    out, err, status = Open3.capture3({"BUNDLE_GEMFILE" => nil, "RUBYOPT" => nil}, RbConfig.ruby, EXE, "stats", "--json", "--config", config,
      chdir: "/")

    assert status.success?, err
    assert_equal 1, JSON.parse(out, symbolize_names: true)[:sql][:rows]
  end

  # A directory this user may not enter (another user's 0700 one): the error names it, not
  # "no such file". As root (who enters any directory) the look is made by a child that has
  # become nobody; otherwise the directory is made 0000.
  def test_a_directory_this_user_may_not_enter_is_named
    closed = File.join(@dir, "closed")
    Dir.mkdir(closed, 0o700)
    path = File.join(closed, "app.l1")
    File.write(path, "x")
    message = if Process.euid.zero?
      reader, writer = IO.pipe
      pid = fork_tracked do
        reader.close
        Process::Sys.setgid(65_534)
        Process::Sys.setuid(65_534)
        writer.write(refusal(path))
        writer.close
        true
      end
      writer.close
      text = reader.read
      assert_equal 0, reap_child(pid)&.exitstatus
      text
    else
      File.chmod(0o000, closed)
      refusal(path)
    end
    assert_match(/is not open to this user \(uid \d+; it is uid \d+'s, mode 700\): run as the app's user/, message)
    refute_match(/no such file/, message)
  ensure
    File.chmod(0o700, closed) if closed && File.exist?(closed)
  end

  def test_bad_usage_exits_2
    _out, err, status = run_stats("--config", "x.yml", @l1_path)

    assert_equal 2, status.exitstatus
    assert_match(/not both/, err)
  end

  private

  def new_store(**options)
    # A namespace of its own: memcached keeps the keys of earlier runs.
    store = ActiveSupport::Cache::StrataStore.new(namespace: "stats-#{SecureRandom.hex(4)}", **options)
    @stores << store
    store
  end

  # Zero segment n's started_ms (shard 0; table.h: data offset, then a u32 fill, 4 unused
  # bytes and the u64 start at the segment's front).
  def zero_segment_start(segment)
    File.open(@l1_path, "r+b") do |file|
      header = Strata::CLI::L1Table::FIELDS.zip(file.pread(4096, 0).unpack(Strata::CLI::L1Table::HEADER)).to_h
      file.pwrite([0].pack("Q<"), header[:data_offset] + segment * header[:segment_size] + 8)
    end
  end

  def config_file(name, options)
    path = File.join(@dir, name)
    File.write(path, YAML.dump(JSON.parse(JSON.generate(options))))
    path
  end

  # A loopback port nothing listens on.
  def closed_port_server
    server = TCPServer.new("127.0.0.1", 0)
    "127.0.0.1:#{server.addr[1]}"
  ensure
    server&.close
  end

  # The message L1Table refuses path with.
  def refusal(path)
    Strata::CLI::L1Table.new(path).stats
    "no refusal"
  rescue Strata::CLI::L1Table::Refused => error
    error.message
  end

  def stats_json(*args)
    out, err, status = run_stats("--json", *args)
    assert status.success?, err
    JSON.parse(out, symbolize_names: true)
  end

  def run_stats(*args)
    Open3.capture3(RbConfig.ruby, "-rbundler/setup", "-I", File.join(ROOT, "lib"), EXE, "stats", *args)
  end
end
