# frozen_string_literal: true

require_relative "store_case"
require "securerandom"
require_relative "../../examples/thumbnail_registry"

# The thumbnail scenario (examples/thumbnail_registry.rb) on all three tiers: warm lookups run no
# SQL, and the mappings survive a memcached flush and a restart with a fresh host table.
class ThumbnailScenarioTest < Strata::StoreCase
  SIGNATURES = Array.new(20) { |i| "resize-#{i}-200x200-jpg" }

  def setup
    @namespace = "thumbs-#{SecureRandom.hex(6)}"
    @generated = []
  end

  def test_warm_hits_run_no_sql
    cache = host("l1-a")
    registry = ThumbnailRegistry.new(cache)
    SIGNATURES.each { |signature| registry.uid_for(signature) { generate(signature) } }

    queries = sql_queries(cache) do
      SIGNATURES.each { |signature| assert_equal uid(signature), registry.uid_for(signature) { flunk } }
    end
    assert_equal 0, queries, "warm lookups are answered above the SQL tier"
    assert_equal SIGNATURES, @generated
  end

  def test_after_memcached_is_flushed_the_sql_tier_answers_and_refills_it
    cache = host("l1-a")
    registry = ThumbnailRegistry.new(cache)
    SIGNATURES.each { |signature| registry.uid_for(signature) { generate(signature) } }

    cache.stack[:l2].clear
    restarted = host("l1-fresh") # a restart: a new host table, nothing in it
    registry = ThumbnailRegistry.new(restarted)
    queries = sql_queries(restarted) do
      SIGNATURES.each { |signature| assert_equal uid(signature), registry.uid_for(signature) { flunk "regenerated #{signature}" } }
    end
    assert_operator queries, :>=, SIGNATURES.size, "the SQL tier answered"

    SIGNATURES.each do |signature|
      key = tier_key(restarted, "thumbnail/#{signature}")
      refute_nil restarted.stack[:l2].get(key), "memcached was refilled"
      refute_nil restarted.stack[:l1].get(key), "the host table was refilled"
    end
    assert_equal 0, sql_queries(restarted) { SIGNATURES.each { |signature| registry.uid_for(signature) { flunk } } }
  end

  def test_a_forgotten_thumbnail_is_gone_from_every_tier
    cache = host("l1-a")
    registry = ThumbnailRegistry.new(cache)
    registry.uid_for("one") { generate("one") }
    registry.forget("one")

    assert_equal uid("one"), ThumbnailRegistry.new(host("l1-fresh")).uid_for("one") { generate("one") }
    assert_equal %w[one one], @generated, "generated again"
  end

  private

  # One host: its own table, the shared memcached and the shared SQLite file.
  def host(l1_name)
    build_store(l1: {path: File.join(@tmpdir, l1_name)}, namespace: @namespace,
      memcached: {servers: Strata::TestSupport.memcached_servers, timeout: 2},
      sql: {path: File.join(@tmpdir, "thumbnails.sqlite3")})
  end

  def generate(signature)
    @generated << signature
    uid(signature)
  end

  def uid(signature)
    "uid-#{signature.hash.abs.to_s(36)}"
  end

  # Statements the cache's SQL tier ran while the block ran: every read, write, delete and
  # expiry pass of the tier is one (its per-process counters count them).
  def sql_queries(cache)
    before = sql_statements(cache)
    yield
    sql_statements(cache) - before
  end

  def sql_statements(cache)
    cache.stack[:l3].stats.values_at(:hits, :misses, :sets, :deletes, :expiry_passes).sum
  end
end
