# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require "strata/tiers/sql"
require "support/child_processes"
require "support/postgres_cluster"

# Dependency tags with PostgreSQL as the SQL tier (the versions' authority), on a throwaway
# cluster of the test's own: the properties of tags_test.rb over L1 + memcached + PostgreSQL and
# L1 + PostgreSQL.
class StrataStoreTagsPostgresTest < Strata::StoreCase
  include Strata::TestSupport::ChildProcesses

  DEADLINE = 30.0

  class Record < ActiveRecord::Base
    self.abstract_class = true
  end

  def setup
    @cluster = Strata::TestSupport::PostgresCluster.new
    Record.establish_connection("#{@cluster.start}?connect_timeout=2&min_messages=error")
    Strata::Tiers::SQL.create_table!(Record)
  end

  def teardown
    Record.remove_connection
    @cluster.destroy
  end

  # A store over L1 (this test's table, or l1_path: another host's) and PostgreSQL, with
  # memcached between them unless memcached: false.
  def host(l1_path: table_path, memcached: true, namespace: @namespace)
    tiers = {l1: {path: l1_path, size: TABLE_SIZE}, sql: {connection_class: Record}}
    tiers[:memcached] = {servers: Strata::TestSupport.memcached_servers, timeout: 2} if memcached
    cache = ActiveSupport::Cache::StrataStore.new(namespace: namespace, **tiers)
    @stores << cache
    cache
  end

  def test_p1_p3_p4_and_nesting_over_postgres
    [true, false].each do |memcached|
      @namespace = "tags-pg-#{memcached}-#{SecureRandom.hex(4)}"
      cache = host(memcached: memcached)
      label = memcached ? "l1+memcached+postgres" : "l1+postgres"

      # P1
      cache.write("stats", 1, tags: ["projects/7"])
      cache.invalidate_tags("projects/7")
      assert_nil cache.read("stats"), label

      # P3, the invalidation from another thread and from another process at a fixed point
      value = cache.fetch("report", tags: ["bugs/42"]) do
        Thread.new { cache.invalidate_tags("bugs/42") }.join
        "old"
      end
      assert_equal "old", value, label
      assert_nil cache.read("report"), label
      cache.fetch("report", tags: ["bugs/42"]) do
        pid = fork_child { host(memcached: memcached).invalidate_tags("bugs/42") }
        assert reap(pid, DEADLINE)&.success?, label
        "old"
      end
      assert_nil cache.read("report"), label

      # nesting
      cache.fetch("page") { cache.fetch("bug", tags: "bugs/1") { "bug" } + "+page" }
      cache.invalidate_tags("bugs/1")
      assert_nil cache.read("page"), label

      # P4: the version rows (and every other copy) deleted: misses only
      cache.write("a", "old", tags: ["t1"])
      Strata::TestSupport.drop_versions(cache, "t1")
      assert_nil cache.read("a"), label
      assert_equal "new", cache.fetch("a", tags: ["t1"]) { "new" }, label
      assert_equal "new", cache.read("a"), label
    end
  end

  # Another host (its own L1) reads the versions' authority in PostgreSQL: after its L1 copy is
  # dropped (the poller's seam) or lapses (coherence_interval), it misses too, and the refill
  # reaches every tier.
  def test_another_host_over_postgres
    @namespace = "tags-pg-hosts-#{SecureRandom.hex(4)}"
    cache = host(memcached: false)
    other = host(l1_path: File.join(@tmpdir, "other.strata"), memcached: false)
    computed = 0
    cache.fetch("page", tags: ["t"]) { computed += 1 }
    assert_equal 1, other.fetch("page", tags: ["t"]) { computed += 1 }

    cache.invalidate_tags("t")
    other.stack.dependencies.bump_local(Strata::Dependencies.tag_id("t"))

    assert_equal 2, other.fetch("page", tags: ["t"]) { computed += 1 }
    assert_equal 2, cache.fetch("page", tags: ["t"]) { computed += 1 }
    assert_equal 2, cache.send(:deserialize_entry, cache.stack[:l3].get(tier_key(cache, "page"))).value
  end
end
