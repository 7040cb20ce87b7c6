# frozen_string_literal: true

require "securerandom"
require "support/child_processes"
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
        key = b.stack.dependencies.version_key(Strata::Dependencies.tag_id("bugs/7"))
        delete_version_rows
        b.stack.tier_names.each { |name| b.stack[name].delete(key) unless name == :l3 }

        assert_nil b.read("tagged")
        in_host("a") { |a| a.read("tagged").nil? && a.fetch("tagged", tags: ["bugs/7"]) { "new" } == "new" }
        assert_equal "new", b.fetch("tagged", tags: ["bugs/7"]) { "newer" }
      end

      private

      # Deletes every row of the versions table, as an operator might.
      def delete_version_rows
        sql = host_store("rows").stack[:l3]
        sql.connection_class.connection_pool.with_connection do |c|
          c.execute("DELETE FROM #{c.quote_table_name(Strata::Tiers::SQL::Schema.versions_table(sql.table_name))}")
        end
      end

      # A store of the host called name: its own L1 file in the test's directory.
      def host_store(name, **options)
        l1 = {path: File.join(@tmpdir, "#{name}.l1"), size: Strata::StoreCase::TABLE_SIZE}
        cache = ActiveSupport::Cache::StrataStore.new(namespace: @namespace ||= "hosts-#{SecureRandom.hex(4)}", l1: l1,
          memcached: {servers: Strata::TestSupport.memcached_servers, timeout: 2}, sql: sql_options,
          coherence_interval: 60, **store_options, **options)
        @stores << cache
        cache
      end

      # host_store, once its poller has read the log (its first round clears L1: see Poller).
      def polling_host(name, **options)
        cache = host_store(name, **options)
        assert wait_until(BOUND) { cache.instance_variable_get(:@poller).last_seen }, "host #{name}'s poller runs"
        cache
      end

      def store_options
        {}
      end

      # Runs the block with a store of host name in a child process, which must succeed.
      def in_host(name, &block)
        pid = fork_child do
          cache = host_store(name)
          result = block.call(cache)
          cache.close
          result
        end
        status = reap(pid, DEADLINE) || kill_and_reap(pid, DEADLINE)
        assert status&.success?, "host #{name} (#{pid}) failed: #{status.inspect}"
      end
    end
  end
end
