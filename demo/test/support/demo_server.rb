# frozen_string_literal: true

require "fileutils"
require "json"
require "net/http"
require "open3"
require "rbconfig"
require "securerandom"
require "strata/clock"
require "tmpdir"
require "uri"

# The demo app under Puma as bin/demo runs it, for the HTTP tests and the bench: a database of its
# own (a SQLite file in a scratch directory, or a database on the server of STRATA_POSTGRES_URL),
# migrated and seeded by bin/rails db:prepare; Puma with 2 workers and preload_app! on a free
# port of 127.0.0.1; the L1 file in the scratch directory. #stop stops Puma, drops the database
# and removes the directory (the L1 file with it).
#
# Every request opens a connection of its own, so any worker may take it; #on_worker stops the
# other workers (SIGSTOP) for the block, so that the one named must take the block's requests.
class DemoServer
  # A worker died: a request got no answer, or a worker's pid is gone. The message has Puma's log.
  class WorkerGone < StandardError; end
  # A request got no answer in time. The message has the workers' thread backtraces.
  class WorkerStuck < StandardError; end

  ROOT = File.expand_path("../..", __dir__)
  WORKERS = 2
  # Seconds for Puma to listen and boot its workers, and to stop.
  BOOT_TIMEOUT = 60
  STOP_TIMEOUT = 30
  # Seconds for a stopped worker's threads to show as stopped in /proc.
  STOP_SIGNAL_TIMEOUT = 5
  # Seconds to wait for the seed's raw tags to be converted (SQLite).
  RAW_TAGS_WAIT = 20
  LISTENING = %r{Listening on http://127\.0\.0\.1:(\d+)}
  BOOTED = /Worker \d+ \(PID: (\d+)\) booted/

  attr_reader :port, :worker_pids, :database_url

  # database: :sqlite or :postgres (a database of its own on postgres_url's server). memcached:
  # "host:port,..." for L2, or nil. threads: Puma threads per worker.
  def initialize(database:, postgres_url: ENV["STRATA_POSTGRES_URL"], memcached: nil, threads: 3)
    raise ArgumentError, "database must be :sqlite or :postgres, got #{database.inspect}" unless %i[sqlite postgres].include?(database)
    raise ArgumentError, "database :postgres needs STRATA_POSTGRES_URL" if database == :postgres && postgres_url.to_s.empty?

    @database = database
    @postgres_url = postgres_url
    @memcached = memcached
    @threads = threads
    @worker_pids = []
    @secret_key_base = SecureRandom.hex(64)
  end

  def postgres?
    @database == :postgres
  end

  # Prepares the database and starts Puma; returns once both workers have booted.
  def start
    @dir = Dir.mktmpdir("strata-test-demo")
    File.chmod(0o700, @dir)
    @database_url = postgres? ? postgres_database_url : "sqlite3:#{File.join(@dir, "demo.sqlite3")}"
    run_command("bin/rails", "db:prepare")
    boot_puma
    wait_for_raw_tags
    self
  rescue
    stop
    raise
  end

  def stop
    stop_puma if @pid
    drop_postgres_database if postgres? && @database_url
    FileUtils.rm_rf(@dir) if @dir
    @dir = nil
  end

  # The environment the app runs with (bin/rails commands included).
  def env
    {
      "DATABASE_URL" => @database_url,
      "STRATA_DEMO_L1" => File.join(@dir, "demo.l1"),
      "STRATA_MEMCACHED" => @memcached.to_s,
      "PORT" => "0",
      "WEB_CONCURRENCY" => WORKERS.to_s,
      "RAILS_MAX_THREADS" => @threads.to_s,
      "STRATA_DEMO_LOG_LEVEL" => "warn",
      "STRATA_DEMO_THREAD_DUMPS" => "1",
      # Else Rails writes one into the demo's tmp (the app uses none: no cookies, no sessions).
      "SECRET_KEY_BASE" => @secret_key_base,
      "BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile")
    }
  end

  # A request on a connection of its own: GET, PATCH or POST (body: a Hash sent as JSON).
  def request(method, path, body: nil, headers: {})
    request = Net::HTTP.const_get(method.to_s.capitalize).new(path, headers)
    if body
      request.body = JSON.generate(body)
      request["Content-Type"] = "application/json"
    end
    Net::HTTP.start("127.0.0.1", @port, open_timeout: 5, read_timeout: 30) { |http| http.request(request) }
  rescue EOFError, Errno::ECONNRESET => error
    raise WorkerGone, "#{method.upcase} #{path}: the connection closed without an answer (#{error.class}); Puma's log:\n#{log}"
  rescue Net::ReadTimeout
    raise WorkerStuck, "#{method.upcase} #{path}: no answer within 30 s; #{stuck_report}"
  end

  # What the workers' threads are doing (SIGPWR: config/puma.rb prints their backtraces to the
  # log) and, on PostgreSQL, what the database's sessions wait for.
  def stuck_report
    @worker_pids.each { |pid| signal(:PWR, pid) }
    deadline = Strata::Clock.monotonic + STOP_SIGNAL_TIMEOUT
    Thread.pass until log.include?("] thread ") || Strata::Clock.monotonic > deadline
    sessions = postgres? ? execute_sql("SELECT pid, state, wait_event_type, wait_event, left(query, 120) AS query FROM pg_stat_activity WHERE datname = current_database()") : []
    "sessions: #{sessions.inspect}\nPuma's log:\n#{log}"
  rescue => error
    "(no report: #{error.class}: #{error.message})\nPuma's log:\n#{log}"
  end

  def get(path, headers: {})
    request(:get, path, headers: headers)
  end

  # Runs the block while every worker but pid is stopped (SIGSTOP, and each of their threads seen
  # stopped in /proc), so that pid takes every connection the block opens; the others go on after.
  def on_worker(pid)
    raise ArgumentError, "#{pid} is not one of the workers #{@worker_pids}" unless @worker_pids.include?(pid)

    gone = @worker_pids.reject { |worker| alive?(worker) }
    raise WorkerGone, "worker #{gone.join(", ")} is gone (Puma replaces a worker that dies); Puma's log:\n#{log}" unless gone.empty?

    others = @worker_pids - [pid]
    others.each { |other| Process.kill(:STOP, other) }
    others.each { |other| wait_stopped(other) }
    yield
  ensure
    others&.each { |other| Process.kill(:CONT, other) }
  end

  # `bin/rails runner code args...` in a process of its own, with the app's environment: the
  # Rails console's way into the app, on the same host (it maps the same L1 file).
  def rails_runner(code, *args)
    run_command("bin/rails", "runner", code, *args)
  end

  # Runs sql with params on a connection of its own, not through Rails: the sqlite3 gem on the
  # database file, or the pg gem on the database.
  def execute_sql(sql, *params)
    if postgres?
      require "pg"
      connection = PG.connect(@database_url)
      begin
        connection.exec_params(sql, params).to_a
      ensure
        connection.close
      end
    else
      require "sqlite3"
      db = SQLite3::Database.new(@database_url.delete_prefix("sqlite3:"))
      begin
        db.busy_timeout = 5000
        db.execute(sql, params)
      ensure
        db.close
      end
    end
  end

  # On SQLite the seed's changes leave their triggers' raw tags for the workers' poller to turn
  # into versions (docs/coherence.md, "Raw SQL: triggers"): a conversion landing during a test
  # would invalidate what it just built. Waits until none is left, at most RAW_TAGS_WAIT s.
  def wait_for_raw_tags
    return if postgres?

    deadline = Strata::Clock.monotonic + RAW_TAGS_WAIT
    sleep 0.05 until execute_sql("SELECT COUNT(*) FROM strata_entries_raw_tags").first.first.zero? || Strata::Clock.monotonic > deadline
  end

  # What Puma printed so far (for failure messages).
  def log
    File.exist?(log_path) ? File.read(log_path) : ""
  end

  private

  def log_path
    File.join(@dir, "puma.log")
  end

  def run_command(*command)
    output, status = Open3.capture2e(env, RbConfig.ruby, *command, chdir: ROOT)
    raise "#{command.join(" ")} failed (#{status}):\n#{output}" unless status.success?

    output
  end

  # Starts Puma in a process group of its own and reads its output until it listens and both
  # workers booted; a thread copies the rest of it to puma.log.
  def boot_puma
    reader, writer = IO.pipe
    puma = Gem.bin_path("puma", "puma")
    @pid = Process.spawn(env, RbConfig.ruby, puma, "-C", "config/puma.rb", chdir: ROOT,
      out: writer, err: writer, pgroup: true)
    writer.close
    log = File.open(log_path, "w")
    log.sync = true
    read_boot(reader, log)
    @drainer = Thread.new do
      IO.copy_stream(reader, log)
    ensure
      reader.close
      log.close
    end
  end

  def read_boot(reader, log)
    deadline = Strata::Clock.monotonic + BOOT_TIMEOUT
    buffer = +""
    until @port && @worker_pids.size == WORKERS
      remaining = deadline - Strata::Clock.monotonic
      raise "Puma did not boot within #{BOOT_TIMEOUT} s:\n#{buffer}" if remaining <= 0 || !reader.wait_readable(remaining)

      chunk = reader.read_nonblock(4096, exception: false)
      raise "Puma exited while booting:\n#{buffer}" if chunk.nil?
      next if chunk == :wait_readable

      log.write(chunk)
      buffer << chunk
      @port ||= buffer[LISTENING, 1]&.to_i
      @worker_pids = buffer.scan(BOOTED).flatten.map(&:to_i).uniq
    end
  end

  def stop_puma
    @worker_pids.each { |pid| signal(:CONT, pid) }
    signal(:TERM, @pid)
    waiter = Process.detach(@pid)
    unless waiter.join(STOP_TIMEOUT)
      signal(:KILL, -@pid)
      waiter.join
    end
    @drainer&.join(STOP_TIMEOUT)
    @pid = nil
  end

  def alive?(pid)
    Process.kill(0, pid)
    true
  rescue Errno::ESRCH
    false
  end

  def signal(name, pid)
    Process.kill(name, pid)
  rescue Errno::ESRCH
    nil
  end

  # Waits until every thread of pid is stopped (state T in /proc/PID/task/*/stat). A stop takes
  # effect as each thread next enters the kernel: microseconds, so this spins.
  def wait_stopped(pid)
    deadline = Strata::Clock.monotonic + STOP_SIGNAL_TIMEOUT
    until Dir["/proc/#{pid}/task/*/stat"].all? { |stat| stopped?(stat) }
      raise "worker #{pid} did not stop within #{STOP_SIGNAL_TIMEOUT} s" if Strata::Clock.monotonic > deadline

      Thread.pass
    end
  end

  # The state field follows the command name, which is in parentheses and may hold any byte.
  def stopped?(stat)
    File.read(stat).rpartition(")").last.lstrip.start_with?("T", "t")
  rescue Errno::ENOENT, Errno::ESRCH
    true # the thread has exited
  end

  def postgres_database_url
    uri = URI(@postgres_url)
    uri.path = "/strata_demo_test_#{Process.pid}"
    uri.to_s
  end

  def drop_postgres_database
    require "pg"
    name = URI(@database_url).path.delete_prefix("/")
    connection = PG.connect(@postgres_url)
    begin
      connection.exec("DROP DATABASE IF EXISTS #{connection.quote_ident(name)} WITH (FORCE)")
    ensure
      connection.close
    end
  end
end
