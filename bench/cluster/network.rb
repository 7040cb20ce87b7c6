# frozen_string_literal: true

require "open3"

module Strata
  module Bench
    module Cluster
      # The test hosts of a cluster run (bin/cluster), on this machine: a bridge, and one network
      # namespace per host joined to it by a veth pair, each with an address of the subnet and its
      # own loopback. This process (the root namespace) has the subnet's first address on the
      # bridge, so it reaches every host, and the hosts reach each other and it. Nothing is
      # routed beyond the subnet: traffic goes to these hosts and to loopback only.
      #
      # Everything it makes is named after prefix (namespaces "<prefix>-<host>", links
      # "<prefix>-br" and "<prefix>-<n>"), so that #down removes it all, also what a run killed
      # before its own #down left (Network.leftovers). Linux names links in 15 bytes at most:
      # prefix is kept short. Needs root and Debian's iproute2 (ip).
      class Network
        PREFIX = "stcl"
        SUBNET = "10.78.0"
        # Hosts at most: their addresses are SUBNET.FIRST_HOST and up.
        MAX_HOSTS = 200
        FIRST_HOST = 10

        attr_reader :prefix

        def initialize(prefix: PREFIX, subnet: SUBNET)
          raise ArgumentError, "prefix #{prefix.inspect} is longer than 8 bytes" if prefix.bytesize > 8

          @prefix = prefix
          @subnet = subnet
          @hosts = {}
        end

        # Makes the bridge and a namespace for each of names (Strings of letters and digits),
        # in order; self. On any failure, removes what it made and raises.
        def up(names)
          raise ArgumentError, "at most #{MAX_HOSTS} hosts" if names.size > MAX_HOSTS

          ip("link", "add", bridge, "type", "bridge")
          ip("addr", "add", "#{@subnet}.1/24", "dev", bridge)
          ip("link", "set", bridge, "up")
          names.each_with_index { |name, index| add_host(name, index) }
          self
        rescue
          down
          raise
        end

        # The address of host name.
        def address(name)
          @hosts.fetch(name)
        end

        # The namespace of host name.
        def namespace(name)
          raise ArgumentError, "no host #{name.inspect}" unless @hosts.key?(name)

          "#{@prefix}-#{name}"
        end

        # The command line that runs argv in host name's namespace.
        def command(name, *argv)
          ["ip", "netns", "exec", namespace(name), *argv]
        end

        # Runs argv in host name's namespace and waits: [stdout, Process::Status].
        def run(name, *argv)
          out, status = Open3.capture2e(*command(name, *argv))
          [out, status]
        end

        # Takes a host off the bridge (its veth down) or puts it back: a cut path.
        def cut(name, cut = true)
          ip("link", "set", veth(@hosts.keys.index(name)), cut ? "down" : "up")
        end

        # Drops (or stops dropping) whatever host name sends to host peer, through a blackhole
        # route in name's namespace: a cut between the two alone, the rest of their paths kept.
        # Over TCP it is a cut both ways: peer's connections to name neither open nor get
        # answers (established ones resume once mended), while name's own new connections to peer
        # fail at once (EINVAL).
        def isolate(name, peer, isolate = true)
          ip("netns", "exec", namespace(name), "ip", "route", isolate ? "add" : "del", "blackhole", "#{address(peer)}/32")
        end

        # Removes every namespace and link named after prefix, after killing (SIGKILL) every
        # process still in such a namespace. Safe to call again.
        def down
          Network.leftovers(@prefix).each do |kind, item|
            next system("ip", "link", "del", item, err: File::NULL) if kind == :link

            `ip netns pids #{item} 2>/dev/null`.split.each do |pid|
              Process.kill(:KILL, Integer(pid))
            rescue Errno::ESRCH
              nil
            end
            system("ip", "netns", "del", item, err: File::NULL)
          end
          @hosts.clear
          nil
        end

        # [[:netns or :link, name], ...] named after prefix, on this machine now.
        def self.leftovers(prefix)
          namespaces = `ip netns list 2>/dev/null`.lines.map { |line| line.split.first }.compact
          links = `ip -o link show 2>/dev/null`.lines.filter_map { |line| line.split(":")[1]&.strip&.split("@")&.first }
          namespaces.select { |name| name.start_with?("#{prefix}-") }.map { |name| [:netns, name] } +
            links.select { |name| name.start_with?("#{prefix}-") }.map { |name| [:link, name] }
        end

        private

        def bridge
          "#{@prefix}-br"
        end

        def veth(index)
          "#{@prefix}-#{index}"
        end

        def add_host(name, index)
          raise ArgumentError, "host names are letters and digits, got #{name.inspect}" unless name.match?(/\A[a-z0-9]+\z/)

          ns = "#{@prefix}-#{name}"
          address = "#{@subnet}.#{FIRST_HOST + index}"
          ip("netns", "add", ns)
          @hosts[name] = address
          ip("link", "add", veth(index), "type", "veth", "peer", "name", "#{veth(index)}p")
          ip("link", "set", "#{veth(index)}p", "netns", ns)
          ip("link", "set", veth(index), "master", bridge)
          ip("link", "set", veth(index), "up")
          ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
          ip("netns", "exec", ns, "ip", "addr", "add", "#{address}/24", "dev", "#{veth(index)}p")
          ip("netns", "exec", ns, "ip", "link", "set", "#{veth(index)}p", "up")
        end

        def ip(*args)
          out, status = Open3.capture2e("ip", *args)
          raise "ip #{args.join(" ")}: #{out.strip}" unless status.success?
        end
      end
    end
  end
end
