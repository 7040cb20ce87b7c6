# frozen_string_literal: true

require "test_helper"
require "json"
require "net/http"
require "open3"
require "rbconfig"
require "securerandom"

# exe/strata dashboard, run as a child process on a real L1 file: it serves the page and
# data.json to the token only, and stops on TERM.
class DashboardCommandTest < Minitest::Test
  include Strata::TestSupport

  ROOT = File.expand_path("../..", __dir__)
  EXE = File.join(ROOT, "exe", "strata")
  TOKEN = "command-test-#{SecureRandom.hex(16)}"
  DEADLINE = 30 # seconds for the child to start or stop

  def setup
    @dir = private_tmpdir
    @l1_path = File.join(@dir, "app.l1")
    table = Strata::Tiers::SharedMemory.new(path: @l1_path, size: 4 << 20)
    2.times { |i| table.set("key-#{i}", "value") }
    table.close
  end

  def teardown
    if @wait_thread&.alive?
      Process.kill(:KILL, @wait_thread.pid)
      @wait_thread.join
    end
    [@stdin, @stdout, @stderr].each { |io| io&.close }
    FileUtils.remove_entry(@dir) if @dir && File.exist?(@dir)
  end

  def test_it_serves_the_token_holder_and_stops_on_term
    port = start({"STRATA_DASHBOARD_TOKEN" => TOKEN}, "--port", "0", @l1_path)

    data = get(port, "/data.json", "Authorization" => "Bearer #{TOKEN}")
    page = get(port, "/?token=#{TOKEN}")
    refused = get(port, "/data.json")
    Process.kill(:TERM, @wait_thread.pid)

    assert_equal "200", data.code
    assert_equal 2, JSON.parse(data.body)["stats"]["l1"]["entries"]
    assert_equal "200", page.code
    assert_includes page["set-cookie"], "HttpOnly; SameSite=Strict"
    assert_equal "401", refused.code
    assert_equal 0, @wait_thread.join(DEADLINE)&.value&.exitstatus
  end

  def test_without_a_token_it_does_not_start
    _out, err, status = Open3.capture3({"STRATA_DASHBOARD_TOKEN" => nil}, *command, "--port", "0", @l1_path)

    assert_equal 2, status.exitstatus
    assert_match(/--token/, err)
  end

  def test_a_short_token_is_refused
    _out, err, status = Open3.capture3(*command, "--port", "0", "--token", "short", @l1_path)

    assert_equal 1, status.exitstatus
    assert_match(/at least 16 bytes/, err)
  end

  private

  def command
    [RbConfig.ruby, "-rbundler/setup", "-I", File.join(ROOT, "lib"), EXE, "dashboard"]
  end

  # Starts the command and returns the port its first line names.
  def start(env, *args)
    @stdin, @stdout, @stderr, @wait_thread = Open3.popen3(env, *command, *args)
    ready = @stdout.wait_readable(DEADLINE) && @stdout.gets
    flunk("no start line: #{@stderr.read_nonblock(4096, exception: false)}") unless ready
    Integer(ready[%r{http://127\.0\.0\.1:(\d+)/}, 1], 10)
  end

  def get(port, path, headers = {})
    Net::HTTP.start("127.0.0.1", port) { |http| http.request(Net::HTTP::Get.new(path, headers)) }
  end
end
