# frozen_string_literal: true

require "securerandom"
require "support/child_processes"
require "support/tcp_proxy"
require "support/memcached_process"
require "support/waiting"

module Strata
  module TestSupport
    # P2 (docs/coherence.md): what one host changes, every other host sees within the bound.
    # A host is a process with an L1 file of its own; the hosts share memcached and an SQL tier
    # that writes the invalidation log. This process is host B, holding copies in its L1; a
    # forked child is host A, which changes them and exits. B must then see every change,
    # through its poller alone: its L1 copies never expire, and it keeps tag versions for a
    # minute (coherence_interval), so nothing else would make it see them.
    #
    # The including class (a StoreCase) defines sql_options: the sql: option of every host's
    # store, and may define store_options (more options of every store).
    module CrossHosts
      include ChildProcesses

      # The SQL tier's tables of one test on a shared database server, made for each test under
      # a name of its own and dropped after it. The including class defines record_class (an
      # abstract Active Record class of its own) and server_url.
      module ServerTables
        def setup
          @connected ||= record_class.establish_connection(server_url)
          @table = "strata_hosts_#{SecureRandom.hex(6)}"
          Strata::Tiers::SQL.create_table!(record_class, table_name: @table)
        end

        def teardown
          record_class.connection_pool.with_connection do |c|
            [@table, "#{@table}_versions", "#{@table}_log"].each { |name| c.drop_table(name, if_exists: true) }
          end
        end

        def sql_options
          {connection_class: record_class, table_name: @table}
        end
      end

      # Seconds a child may take; seconds host B may take to see a change.
      DEADLINE = 30
      BOUND = 10

      def test_p2_another_hosts_write_delete_and_invalidate_tags_reach_this_hosts_l1
        b = polling_host("b")
        b.write("written", "old")
        b.write("deleted", "here")
        b.write("tagged", "old", tags: ["bugs/42"])
        b.write("untouched", "kept")
        assert_equal ["old", "here", "old"], [b.read("written"), b.read("deleted"), b.read("tagged")]
        refute_nil b.stack[:l1].get(tier_key(b, "written")), "B's L1 holds its copy"

        in_host("a") do |a|
          a.write("written", "new") && a.delete("deleted") && a.invalidate_tags("bugs/42")
        end

        assert wait_until(BOUND) { b.read("written") == "new" }, "a plain write reaches B"
        assert wait_until(BOUND) { b.read("deleted").nil? }, "a plain delete reaches B"
        assert wait_until(BOUND) { b.read("tagged").nil? }, "invalidate_tags reaches B"
        assert_equal "kept", b.read("untouched")
        assert_equal "filled", b.fetch("tagged", tags: ["bugs/42"]) { "filled" }
        assert_equal "filled", b.read("tagged")
      end

      def test_p2_another_hosts_clear_clears_this_hosts_l1
        b = polling_host("b")
        b.write("k", "v")
        in_host("a", &:clear)
        assert wait_until(BOUND) { b.stack[:l1].get(tier_key(b, "k")).nil? }
        assert_nil b.read("k")
      end

      # P4: the versions' rows and every copy of them gone, entries stamped with them only miss,
      # on this host and on another.
      def test_p4_losing_the_versions_costs_misses_only
        b = polling_host("b")
        b.write("tagged", "old", tags: ["bugs/7"])
        delete_version_rows
        Strata::TestSupport.drop_versions(b, "bugs/7", only: b.stack.tier_names - [:l3])

        assert_nil b.read("tagged")
        in_host("a") { |a| a.read("tagged").nil? && a.fetch("tagged", tags: ["bugs/7"]) { "new" } == "new" }
        assert_equal "new", b.fetch("tagged", tags: ["bugs/7"]) { "newer" }
      end

      # The ordering rule (docs/coherence.md): host A's row commits in SQL before its change
      # reaches memcached (a round trip later on a real network; here a proxy holds A's
      # requests until B has applied the row). B's next read must not take memcached's old copy
      # back into its L1, where no later row would drop it.
      def test_a_change_that_reaches_memcached_after_its_row_is_not_undone_on_another_host
        server = Strata::TestSupport.memcached_servers.first
        proxy = proxy_to(server)
        b = polling_host("b", memcached: {servers: [server]})
        {"written" => [:write, "new"], "deleted" => [:delete, nil]}.each do |name, (change, after)|
          l1_key = tier_key(b, name)
          b.write(name, "old")
          applied_all(b) # B's own row took memcached's copy: the read below puts it back
          b.stack[:l1].delete(l1_key)
          assert_equal "old", b.read(name)
          refute_nil b.stack[:l2].get(l1_key), "memcached holds the old copy"

          proxy.hold
          pid = fork_child do
            a = host_store("a", memcached: {servers: [proxy.address], timeout: DEADLINE})
            result = (change == :write) ? a.write(name, after) : a.delete(name)
            a.close
            result
          end
          assert wait_until(BOUND) { b.stack[:l1].get(l1_key).nil? }, "#{change}: B's poller applied A's row"
          assert_equal [after], [b.read(name)], "#{change}: B reads the change while it has not reached memcached"

          proxy.release
          status = reap(pid, DEADLINE) || kill_and_reap(pid, DEADLINE)
          assert status&.success?, "host a (#{pid}): #{status.inspect}"
          assert_equal [after], [b.read(name)], "#{change}: and after it did"
          b.stack[:l1].delete(l1_key)
          assert_equal [after], [b.read(name)], "#{change}: memcached and SQL agree"
        end
      ensure
        proxy&.close
      end

      # memcached stopped (SIGSTOP) while host A writes and deletes, then running again with its
      # old copies; A's requests timed out, and A exited with its recovery log. B's poller could
      # not settle the keys while the server was stopped: it keeps them, and settles them once it
      # answers, so that neither B nor any other client of the server reads the old values.
      def test_a_change_made_while_memcached_was_stopped_is_not_undone_when_it_runs_again
        server = MemcachedProcess.new.start
        options = {servers: [server.server], timeout: 0.2, retry_after: 0.2}
        b = polling_host("b", memcached: options)
        poller = b.engine.poller
        b.write("written", "old")
        b.write("deleted", "here")
        applied_all(b)
        keys = %w[written deleted].map { |name| tier_key(b, name) }
        keys.each { |key| b.stack[:l1].delete(key) }
        assert_equal ["old", "here"], [b.read("written"), b.read("deleted")]
        assert_equal 2, b.stack[:l2].get_multi(keys).size, "memcached holds both"

        server.pause
        in_host("a", memcached: options) do |a|
          a.write("written", "new")
          a.delete("deleted")
          true # both time out in memcached
        end
        assert wait_until(BOUND) { keys.none? { |key| b.stack[:l1].get(key) } }, "B's poller applied A's rows"
        assert wait_until(BOUND) { poller.instance_variable_get(:@unsettled).size == 2 }, "and keeps the keys it could not settle"

        server.resume
        assert wait_until(BOUND) { poller.instance_variable_get(:@unsettled).empty? }, "settled once the server answers"
        # A's requests, buffered by the kernel, may have run once the server did: its new value
        # (or nothing) is there, never the old one.
        fresh = Strata::Meta::Client.new(servers: [server.server])
        held = fresh.get_multi(keys)
        fresh.close
        assert_equal b.stack[:l3].peek_multi(keys).slice(*held.keys), held, "no client of the server reads the old copies"
        assert_equal ["new", nil], [b.read("written"), b.read("deleted")]
      ensure
        server&.kill
      end

      # A soft invalidation on host A reaches B as stale, not missing: B's L1 keeps its copy and
      # answers it while A recomputes; A's new value then reaches B through the log.
      def test_a_soft_invalidation_reaches_another_host_stale_and_then_its_new_value
        b = polling_host("b")
        b.write("tagged", "old", tags: ["bugs/5"])
        key = tier_key(b, "tagged")
        in_host("a") { |a| a.invalidate_tags("bugs/5", soft: true) }
        applied_all(b)

        refute_nil b.stack[:l1].get(key), "B's L1 keeps its copy"
        assert_equal "old", b.read("tagged"), "and answers it, stale"
        in_host("a") { |a| a.fetch("tagged", tags: ["bugs/5"]) { "new" } == "new" }
        assert wait_until(BOUND) { b.read("tagged") == "new" }, "A's new value reaches B"
      end

      # B's poller stopped: B's copy of the tag's version lapses after coherence_interval, and
      # from then on the window holds as on A: stale, then missing once it ends.
      def test_a_soft_invalidation_ends_on_a_host_whose_poller_stopped
        b = polling_host("b", coherence_interval: 0.5)
        b.engine.poller.stop
        b.write("tagged", "old", tags: ["bugs/6"])
        in_host("a") { |a| a.invalidate_tags("bugs/6", soft: true, stale_for: 1) }

        assert_equal "old", b.read("tagged")
        assert wait_until(BOUND) { b.read("tagged").nil? }, "missing once the window ended"
      end

      # What B's poller could not settle is not lost with it: host A's change never reached
      # memcached (A's path cut), nor did B's holder's settle (its path cut too), and then that
      # holder closes. The process of B that takes the election over applies the row again, from
      # the place the state names, and settles memcached's old copy, which B's readers would
      # otherwise take back into L1 for good.
      def test_what_the_holder_could_not_settle_is_settled_by_the_next_holder
        server = Strata::TestSupport.memcached_servers.first
        path_a = proxy_to(server)
        path_b = proxy_to(server)
        options = {timeout: 0.2, retry_after: 0.2}
        # Polling, NOTIFY or not: the successor's first rounds come after the holder's close.
        holder = polling_host("b", poll_interval: 0.05, memcached: options.merge(servers: [path_b.address]))
        assert wait_until(BOUND) { holder.engine.poller.holding? }
        successor = host_store("b", poll_interval: 0.05, memcached: options.merge(servers: [server]))
        key = tier_key(holder, "written")
        holder.write("written", "old")
        applied_all(holder)
        holder.stack[:l1].delete(key)
        assert_equal "old", holder.read("written")
        assert_equal "old", successor.read("written")
        refute_nil successor.stack[:l2].get(key), "memcached holds the old copy"

        path_a.cut
        path_b.cut
        in_host("a", memcached: options.merge(servers: [path_a.address])) do |a|
          a.write("written", "new")
          true # memcached never hears of it
        end
        assert wait_until(BOUND) { holder.engine.poller.instance_variable_get(:@unsettled).size == 1 }, "the holder keeps the key"
        holder.close

        poller = successor.engine.poller
        head = successor.stack[:l3].log_head
        assert wait_until(BOUND) { poller.holding? && poller.last_seen.to_i >= head && successor.stack[:l2].get(key).nil? },
          "the successor settles memcached's copy"
        assert_equal "new", successor.read("written")
      ensure
        path_a&.close
        path_b&.close
      end

      # A bump that never reached memcached, whose old version B's poller could not drop either:
      # host A's path and B's cut while A invalidates a tag. Once B's path is mended, memcached
      # still holds the old version, which A (gone with its recovery log) never deletes, nor
      # does B's recovery log for B's other processes. B's poller keeps the tag and drops it
      # once the server answers; until then its rounds vouch for nothing (were they to vouch, a
      # copy another process of B read back from memcached would be served from L1 for
      # POLLED_TTL).
      def test_a_bump_memcached_missed_is_dropped_when_the_pollers_path_is_back
        server = Strata::TestSupport.memcached_servers.first
        path_a = proxy_to(server)
        path_b = proxy_to(server)
        options = {timeout: 0.2, retry_after: 0.2}
        b = polling_host("b", memcached: options.merge(servers: [path_b.address]))
        poller = b.engine.poller
        b.write("tagged", "old", tags: ["bugs/9"])
        applied_all(b)
        assert_equal "old", b.read("tagged")

        path_a.cut
        path_b.cut
        in_host("a", memcached: options.merge(servers: [path_a.address])) do |a|
          a.invalidate_tags("bugs/9")
          true # memcached never hears of it
        end
        assert wait_until(BOUND) { poller.instance_variable_get(:@undropped).size == 1 }, "B's poller keeps the tag it could not drop"

        path_b.mend
        assert wait_until(BOUND) { poller.instance_variable_get(:@undropped).empty? }, "dropped once the server answers"
        in_host("b", memcached: options.merge(servers: [server])) { |other| other.read("tagged").nil? }
        assert_nil b.read("tagged")
        assert_equal "new", b.fetch("tagged", tags: ["bugs/9"]) { "new" }
      ensure
        path_a&.close
        path_b&.close
      end

      private

      # A TcpProxy to server ("host:port").
      def proxy_to(server)
        TcpProxy.new(*server.split(":").then { |host, port| [host, Integer(port)] })
      end

      # Deletes every row of the versions table, as an operator might.
      def delete_version_rows
        sql = host_store("rows").stack[:l3]
        sql.connection_class.connection_pool.with_connection do |c|
          c.execute("DELETE FROM #{c.quote_table_name(Strata::Tiers::SQL::Schema.versions_table(sql.table_name))}")
        end
      end

      # A store of the host called name: its own L1 file in the test's directory.
      # memcached: options over the default ones (every test server, a 2 s timeout).
      def host_store(name, memcached: {}, **options)
        l1 = {path: File.join(@tmpdir, "#{name}.l1"), size: Strata::StoreCase::TABLE_SIZE}
        cache = ActiveSupport::Cache::StrataStore.new(namespace: @namespace ||= "hosts-#{SecureRandom.hex(4)}", l1: l1,
          memcached: {servers: Strata::TestSupport.memcached_servers, timeout: 2, **memcached}, sql: sql_options,
          coherence_interval: 60, **store_options, **options)
        @stores << cache
        cache
      end

      # Waits until cache's poller has applied every row the log has now.
      def applied_all(cache)
        head = cache.stack[:l3].log_head
        assert wait_until(BOUND) { cache.engine.poller.last_seen.to_i >= head }, "the poller reached #{head}"
      end

      # host_store, once its poller holds the host's election and has read the log (its first
      # round clears L1: see Poller). Until then the state says FRESH (-1), and a child forked
      # (#in_host) restarts the poller, which could take the election over for its lease.
      def polling_host(name, **options)
        cache = host_store(name, **options)
        poller = cache.engine.poller
        assert wait_until(BOUND) { (seen = poller.last_seen) && seen >= 0 && poller.holding? }, "host #{name}'s poller runs"
        cache
      end

      def store_options
        {}
      end

      # Runs the block with a store of host name (options: host_store's) in a child process,
      # which must succeed. One still running near the deadline says where it waits, in the
      # failure's message.
      def in_host(name, **options, &block)
        where = File.join(@tmpdir, "#{name}.where")
        FileUtils.rm_f(where) # an earlier child's of the same name
        pid = fork_child(report_after: DEADLINE - 5, report_to: where) do
          cache = host_store(name, **options)
          result = block.call(cache)
          cache.close
          result
        end
        status = reap(pid, DEADLINE) || kill_and_reap(pid, DEADLINE)
        assert status&.success?, "host #{name} (#{pid}) failed: #{status.inspect}\n#{File.read(where) if File.exist?(where)}"
      end
    end
  end
end
