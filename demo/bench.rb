# frozen_string_literal: true

# The demo's number (issue 25; docs/demo.md): the mean time of FETCHES fetches of one bug's entry
# and of one collection page of 75, over HTTP against the demo app under Puma, with each of the
# representation caches: none, an in-process Hash (MemoryStore, per worker), a floor (FloorCache:
# a frozen Hash, the least any cache can cost), Strata L1 (over the SQL tier) and, when
# STRATA_MEMCACHED names servers, Strata L1 + memcached (a second server). Run by `bin/bench --demo`,
# or in the Debian 13 root (the demo is a Rails 8.1 app on Ruby 3.3) as
#
#   script/trixie run env BUNDLE_GEMFILE=$PWD/demo/Gemfile BUNDLE_PATH=$PWD/vendor/bundle \
#     sh -c 'cd demo && bundle exec ruby bench.rb [--rounds N] [--database sqlite|postgres]'
#
# Each cell's fetches go over one keep-alive connection, so to one worker, after WARMUP fetches
# that fill the caches it reads. Both servers run at once and each round goes through every
# cell in turn, so a spell of load on the shared machine touches all of them alike. A cell's
# time is the median of its rounds' means; a ratio is the median of the ratios of the two cells'
# means in each round (as bench/paired_ratio.rb pairs cells). "server page/entry" is the same
# ratio of the times Rails took (X-Runtime), without Puma, the connection and the client.
# Nothing is asserted: it prints the tables and whether the issue's goals were met.

require "json"
require "net/http"
require "optparse"
require "etc"
require_relative "test/support/demo_server"

module DemoBench
  FETCHES = 30
  WARMUP = 5
  ROUNDS = 10
  ENTRY = "/bugs/1"
  PAGE = "/bugs?start=0&size=75"
  # X-Viewer of each table: one who may see every field, and one who sees no owner's email (every
  # entry of the page parsed, stripped and generated again).
  VIEWERS = {"admin" => "admin (sees every field)", "" => "anonymous (owner_email stripped from every entry)"}.freeze
  # The issue's goals: a page with Strata at most 1.3x an entry, and within 10% of the Hash.
  PAGE_PER_ENTRY_GOAL = 1.3
  VERSUS_HASH_GOAL = 1.1

  # A column of the table: a label, the X-Representation-Cache header and whether it needs the
  # server with memcached.
  Cache = Struct.new(:label, :header, :memcached)
  CACHES = [
    Cache.new("no cache", "none", false),
    Cache.new("in-process Hash", "memory", false),
    Cache.new("floor (frozen Hash, no store)", "floor", false),
    Cache.new("Strata L1", "strata", false),
    Cache.new("Strata L1 + memcached", "strata", true)
  ].freeze

  module_function

  def run(argv)
    options = parse(argv)
    memcached = ENV["STRATA_MEMCACHED"].to_s
    caches = memcached.empty? ? CACHES.reject(&:memcached) : CACHES
    warn "bench: no STRATA_MEMCACHED; Strata L1 + memcached is left out" if memcached.empty?
    servers = caches.map(&:memcached).uniq.to_h do |with_memcached|
      [with_memcached, DemoServer.new(database: options[:database], memcached: (memcached if with_memcached))]
    end
    begin
      servers.each_value(&:start)
      rounds = measure(servers, caches, options[:rounds])
    ensure
      servers.each_value(&:stop)
    end
    puts header(options, memcached)
    VIEWERS.each { |viewer, title| puts "", table(caches, rounds, viewer, title) }
    puts "", goals(caches, rounds)
  end

  def parse(argv)
    options = {rounds: ROUNDS, database: :sqlite}
    OptionParser.new do |o|
      o.banner = "Usage: demo/bench.rb [--rounds N] [--database sqlite|postgres]"
      o.on("--rounds N", Integer, "rounds of #{FETCHES} fetches per cell (default #{ROUNDS})") { |n| options[:rounds] = n }
      o.on("--database NAME", %w[sqlite postgres], "the app's database (postgres: on STRATA_POSTGRES_URL's server)") do |name|
        options[:database] = name.to_sym
      end
    end.parse!(argv)
    raise OptionParser::InvalidArgument, "--rounds must be at least 1" if options[:rounds] < 1

    options
  end

  # {[cache, viewer, path] => [[seconds per fetch, seconds the server took per fetch] in each round]}.
  def measure(servers, caches, rounds)
    cells = caches.product(VIEWERS.keys, [ENTRY, PAGE])
    connections = cells.to_h { |cell| [cell, connect(servers.fetch(cell[0].memcached))] }
    cells.each { |cell| WARMUP.times { fetch(connections[cell], cell) } }
    means = cells.to_h { |cell| [cell, []] }
    rounds.times do
      cells.each { |cell| means[cell] << mean_time(connections[cell], cell) }
    end
    means
  ensure
    connections&.each_value(&:finish)
  end

  def connect(server)
    http = Net::HTTP.new("127.0.0.1", server.port)
    http.keep_alive_timeout = 60
    http.start
  end

  # The mean time per fetch, at the client and at the server (Rails' X-Runtime).
  def mean_time(http, cell)
    server = 0.0
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    FETCHES.times { server += fetch(http, cell)["X-Runtime"].to_f }
    [(Process.clock_gettime(Process::CLOCK_MONOTONIC) - started) / FETCHES, server / FETCHES]
  end

  def fetch(http, (cache, viewer, path))
    headers = {"X-Representation-Cache" => cache.header}
    headers["X-Viewer"] = viewer unless viewer.empty?
    response = http.get(path, headers)
    raise "GET #{path} (#{cache.label}): #{response.code} #{response.body[0, 200]}" unless response.code == "200"

    response
  end

  def median(values)
    sorted = values.sort
    (sorted[(sorted.size - 1) / 2] + sorted[sorted.size / 2]) / 2.0
  end

  # The median over rounds of top's mean over bottom's mean in the same round; side: 0, the
  # client's times, 1 the server's.
  def paired(top, bottom, side = 0)
    median(top.zip(bottom).map { |a, b| a[side] / b[side] })
  end

  def median_time(rounds)
    median(rounds.map(&:first))
  end

  def header(options, memcached)
    "demo bench: #{RUBY_DESCRIPTION}\n" \
      "Puma #{Gem.loaded_specs["puma"]&.version} (#{DemoServer::WORKERS} workers, 3 threads), Rails #{Gem.loaded_specs["railties"]&.version}, " \
      "#{options[:database]}; #{Etc.nprocessors} CPUs; memcached #{memcached.empty? ? "none" : memcached}\n" \
      "mean of #{FETCHES} fetches over one keep-alive connection, median of #{options[:rounds]} round(s); " \
      "entry #{ENTRY}, page #{PAGE}"
  end

  def table(caches, rounds, viewer, title)
    rows = [["viewer #{title}", "entry ms", "page ms", "page/entry", "page vs Hash", "server page/entry"]]
    hash_page = rounds[[caches[1], viewer, PAGE]]
    caches.each do |cache|
      entry = rounds[[cache, viewer, ENTRY]]
      page = rounds[[cache, viewer, PAGE]]
      rows << [cache.label, ms(median_time(entry)), ms(median_time(page)), ratio(paired(page, entry)),
        ratio(paired(page, hash_page)), ratio(paired(page, entry, 1))]
    end
    widths = rows.transpose.map { |column| column.map(&:size).max }
    rows.map { |row| row.each_with_index.map { |cell, i| i.zero? ? cell.ljust(widths[i]) : cell.rjust(widths[i]) }.join("  ") }.join("\n")
  end

  # Whether each Strata column met the issue's goals, for the viewer who sees every field, and
  # the floor's page/entry: the least any cache can reach in this app.
  def goals(caches, rounds)
    hash_page = rounds[[caches[1], "admin", PAGE]]
    floor = caches.find { |cache| cache.header == "floor" }
    floor_line = if floor
      "floor, admin: page #{ratio(paired(rounds[[floor, "admin", PAGE]], rounds[[floor, "admin", ENTRY]]))} its entry " \
        "(the app's work around the cache: no cache can do better here)"
    end
    lines = caches.select { |cache| cache.header == "strata" }.map do |cache|
      page = rounds[[cache, "admin", PAGE]]
      per_entry = paired(page, rounds[[cache, "admin", ENTRY]])
      versus = paired(page, hash_page)
      "#{cache.label}, admin: page #{ratio(per_entry)} its entry (goal <= #{PAGE_PER_ENTRY_GOAL}x: #{met(per_entry <= PAGE_PER_ENTRY_GOAL)}), " \
        "#{ratio(versus)} the Hash's page (goal <= #{VERSUS_HASH_GOAL}x: #{met(versus <= VERSUS_HASH_GOAL)})"
    end
    [floor_line, *lines].compact.join("\n")
  end

  def ms(seconds)
    format("%.2f", seconds * 1000)
  end

  def ratio(value)
    format("%.2fx", value)
  end

  def met(yes)
    yes ? "met" : "not met"
  end
end

DemoBench.run(ARGV) if $PROGRAM_NAME == __FILE__
