# frozen_string_literal: true

require "fileutils"
require "socket"
require_relative "network"

module Strata
  module Bench
    module Cluster
      # The cluster's test hosts and their servers (bin/cluster): the network (Network), memcached
      # on mc1-mc3 and PostgreSQL on pg (script/postgres, with pg_stat_statements). The app hosts app1-app3 are left empty
      # here: Run starts the demo app on them. Everything a run starts is found again by #down
      # from STATE_DIR (memcached's pid files, PostgreSQL's directory) and the network's prefix,
      # also after a run that was killed.
      class Hosts
        APPS = %w[app1 app2 app3].freeze
        MEMCACHED = %w[mc1 mc2 mc3].freeze
        ALL = (MEMCACHED + ["pg"] + APPS).freeze
        MEMCACHED_PORT = 11_211
        POSTGRES_PORT = 5432
        STATE_DIR = "/tmp/strata-cluster"
        POSTGRES = File.expand_path("../../script/postgres", __dir__)
        # The app hosts' L1 files (App#l1_path): in /dev/shm, which the Debian 13 root shares, in
        # a directory of this user's that no other can write (Strata refuses any other).
        L1_DIR = "/dev/shm/strata-cluster"
        # Seconds for a memcached node to answer once started.
        START_TIMEOUT = 10

        attr_reader :network, :postgres_url

        def initialize(network = Network.new)
          @network = network
        end

        # Removes what an earlier run left, then builds the network and starts the servers.
        # On any failure (Ctrl-C included), removes it all and raises.
        def up
          down
          @network.up(ALL)
          FileUtils.mkdir_p(postgres_dir)
          FileUtils.mkdir_p(L1_DIR, mode: 0o700)
          MEMCACHED.each { |host| start_memcached(host) }
          out, status = @network.run("pg", "env", "STRATA_POSTGRES_LISTEN=#{address("pg")}/24", "STRATA_POSTGRES_STATEMENTS=1", POSTGRES, "start",
            postgres_dir, POSTGRES_PORT.to_s)
          raise "PostgreSQL did not start in pg: #{out}" unless status.success?

          @postgres_url = out.lines.last.strip
          self
        rescue Exception # rubocop:disable Lint/RescueException -- Ctrl-C too: nothing is left behind
          down
          raise
        end

        # Stops every server a run started and removes the network. Safe to call again.
        def down
          system(POSTGRES, "stop", postgres_dir, out: File::NULL, err: File::NULL) if Dir.exist?(postgres_dir)
          MEMCACHED.each { |host| kill_memcached(host) }
          FileUtils.rm_rf(STATE_DIR)
          FileUtils.rm_rf(L1_DIR)
          @network.down
        end

        def address(host)
          @network.address(host)
        end

        # "address:port,..." of the memcached nodes.
        def memcached_servers
          MEMCACHED.map { |host| "#{address(host)}:#{MEMCACHED_PORT}" }
        end

        # Starts memcached on host (a daemon, its pid in STATE_DIR) and waits until it answers.
        def start_memcached(host)
          FileUtils.mkdir_p(STATE_DIR)
          out, status = @network.run(host, "memcached", "-d", "-l", address(host), "-p", MEMCACHED_PORT.to_s,
            "-u", "root", "-U", "0", "-m", "64", "-P", pid_file(host))
          raise "memcached did not start in #{host}: #{out}" unless status.success?

          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + START_TIMEOUT
          until memcached(host, "version")
            raise "memcached in #{host} does not answer" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

            sleep 0.05
          end
        end

        # kill -9 of host's memcached; true when one ran.
        def kill_memcached(host)
          pid = Integer(File.read(pid_file(host)).strip, exception: false) if File.exist?(pid_file(host))
          return false unless pid

          Process.kill(:KILL, pid)
          File.delete(pid_file(host))
          true
        rescue Errno::ESRCH
          File.delete(pid_file(host))
          false
        end

        # Sends command (one line: "stats", "flush_all", ...) to host's memcached and reads its
        # answer up to END, OK or an error line; nil when the node does not answer.
        def memcached(host, command)
          Socket.tcp(address(host), MEMCACHED_PORT, connect_timeout: 1) do |socket|
            socket.write("#{command}\r\n")
            answer = +""
            until answer.match?(/^(END|OK|RESET|VERSION .*|ERROR.*|CLIENT_ERROR.*|SERVER_ERROR.*)\r\n\z/)
              raise IOError, "no answer" unless socket.wait_readable(2)

              answer << socket.readpartial(65_536)
            end
            answer
          end
        rescue IOError, SystemCallError
          nil
        end

        # {"get_hits" => n, ...} of host's memcached, or nil when it does not answer.
        def memcached_stats(host)
          memcached(host, "stats")&.scan(/^STAT (\S+) (\S+)\r$/)&.to_h { |name, value| [name, Integer(value, exception: false) || value] }
        end

        private

        def pid_file(host)
          File.join(STATE_DIR, "#{host}.pid")
        end

        def postgres_dir
          File.join(STATE_DIR, "postgres")
        end
      end
    end
  end
end
