# frozen_string_literal: true

require "minitest/autorun"
require "socket"
require_relative "../../bench/cluster/network"
require_relative "../support/waiting"

# bin/cluster's test hosts (bench/cluster/network.rb): network namespaces on a bridge, which
# reach each other and this process, whose path can be cut, two of which can be cut from each
# other alone, and of which nothing is left once the network is down. Real namespaces, a real
# memcached in one; needs root.
class BenchClusterNetworkTest < Minitest::Test
  include Strata::Waiting

  def setup
    skip "network namespaces need root" unless Process.euid.zero?
    # Named and addressed after this process: bin/test runs two Ruby lines at once.
    pid = Process.pid
    @network = Strata::Bench::Cluster::Network.new(prefix: "stt#{pid % 10_000}", subnet: "10.#{80 + pid % 100}.#{pid / 100 % 250 + 1}")
  end

  def teardown
    if @pid
      Process.kill(:KILL, @pid)
      Process.wait(@pid)
    end
    @network&.down
  end

  def test_hosts_reach_each_other_and_this_process_a_path_can_be_cut_a_pair_isolated_and_nothing_is_left
    @network.up(%w[a b])
    server = @network.address("a")
    @pid = Process.spawn(*@network.command("a", "memcached", "-l", server, "-p", "11211", "-u", "root", "-U", "0"),
      out: File::NULL, err: File::NULL)
    assert wait_until(10) { version(server) }, "this process reaches host a"
    assert_match(/\AVERSION/, from_b(server), "host b reaches host a")

    @network.cut("b")
    assert_nil from_b(server), "host b's path is cut"
    @network.cut("b", false)
    assert wait_until(10) { from_b(server) }, "and mended"

    @network.isolate("a", "b")
    assert_nil from_b(server), "host a drops what it sends host b"
    assert version(server), "and still answers this process"
    @network.isolate("a", "b", false)
    assert wait_until(10) { from_b(server) }, "and mended"

    Process.kill(:KILL, @pid)
    Process.wait(@pid)
    @pid = nil
    @network.down
    assert_empty Strata::Bench::Cluster::Network.leftovers(@network.prefix)
  end

  private

  # memcached's version line from host (an address), or nil when it does not answer.
  def version(host)
    Socket.tcp(host, 11_211, connect_timeout: 1) do |socket|
      socket.write("version\r\n")
      socket.gets
    end
  rescue SystemCallError, IOError
    nil
  end

  # What memcached at host answers to version, asked from host b's namespace (1 s at most),
  # or nil when it does not.
  def from_b(host)
    out, status = @network.run("b", "timeout", "1", "bash", "-c",
      "exec 3<>/dev/tcp/#{host}/11211 && printf 'version\\r\\n' >&3 && head -n 1 <&3")
    status.success? ? out : nil
  end
end
