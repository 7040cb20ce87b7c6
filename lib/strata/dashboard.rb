# frozen_string_literal: true

require "cgi"
require "json"
require "strata/cli/stats"
require "strata/dashboard/access"
require "strata/dashboard/history"
require "strata/dashboard/shared_history"
require "strata/dashboard/samples"
require "strata/dashboard/vm_reports"
require "strata/vm_watch"

module Strata
  # The live page: a Rack app (plain Rack: any object with call(env)) that serves one HTML page,
  # its script and stylesheet (lib/strata/dashboard/assets, no CDN) and data.json, which the
  # page polls once a second: the host's figures (`strata stats`'s snapshot), the time series
  # of them (SharedHistory in the host's L1 table, which every process serving the page
  # shares; History in this process without one) and the top keys and tags the app processes
  # sampled (Sampler, read back from L1 by Samples), and the VM watch's recent reports when it
  # runs in the app's process (VMReports). docs/operations.md says what each chart shows.
  #
  #   # config/routes.rb, behind the app's own authentication:
  #   mount Strata::Dashboard.new(config: "config/strata.yml", authorize: ->(env) { admin?(env) }) => "/strata"
  #   # or with a token:
  #   mount Strata::Dashboard.new(config: {l1: {path: "/dev/shm/strata-1000/app.l1"}}, token: ENV["STRATA_TOKEN"]) => "/strata"
  #
  # `strata dashboard` runs it standalone (Dashboard::Server). Every request is refused (403)
  # unless it is authorized (Access). Mounted under a path, it takes that path from
  # SCRIPT_NAME. Thread-safe: a new snapshot is taken by one request at a time, at most once per
  # interval, and shared by the others.
  class Dashboard
    autoload :Sampler, "strata/dashboard/sampler"
    autoload :Server, "strata/dashboard/server"

    ASSETS_DIR = File.expand_path("dashboard/assets", __dir__)
    ASSETS = {"/dashboard.js" => ["dashboard.js", "text/javascript; charset=utf-8"],
              "/dashboard.css" => ["dashboard.css", "text/css; charset=utf-8"]}.freeze
    HEADERS = {"x-content-type-options" => "nosniff", "referrer-policy" => "no-referrer", "cache-control" => "no-store",
               "content-security-policy" => "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"}.freeze
    INTERVAL = 1.0 # seconds between snapshots

    # config: the store's tier options (a Hash, as given to config.cache_store after
    # :strata_store), a .rb or .yml file of them, or a Strata::CLI::Config. token: a secret
    # String (at least 16 bytes) that requests must carry; authorize: a callable given the Rack
    # env, true for a request the app has authenticated. interval: seconds between snapshots.
    # vm_watch: the VMWatch::Ring whose reports to show, or nil where none can be seen (`strata
    # dashboard` runs in a process of its own, which no request passes through). clock: callable
    # returning the time in epoch seconds, the points' times.
    def initialize(config:, token: nil, authorize: nil, interval: INTERVAL, vm_watch: VMWatch.ring, clock: -> { Time.now.to_f })
      @access = Access.new(token: token, authorize: authorize)
      @config = configuration(config)
      @stats = CLI::Stats.new(@config, out: nil)
      @l1 = @config.l1_path && CLI::L1Table.new(@config.l1_path)
      @interval = interval
      @vm_watch = vm_watch
      @clock = clock
      @history = @l1 ? SharedHistory.new(interval: interval) : History.new
      @latest = nil
      @taken_at = nil
      @lock = Mutex.new
      @page = File.read(File.join(ASSETS_DIR, "index.html"))
      @assets = ASSETS.transform_values { |(file, type)| [File.read(File.join(ASSETS_DIR, file)), type] }
    end

    def call(env)
      return respond(405, "text/plain", "only GET\n") unless env["REQUEST_METHOD"] == "GET"

      decision = @access.decide(env)
      unless decision.allowed
        return respond(403, "text/plain; charset=utf-8", "Strata dashboard: #{decision.reason}.\n") unless decision.challenge

        response = respond(401, "text/plain; charset=utf-8", "Strata dashboard: #{decision.reason}.\n")
        response[1]["www-authenticate"] = %(Basic realm="Strata dashboard", charset="UTF-8")
        return response
      end

      path = env["PATH_INFO"].to_s
      response = case path
      when "", "/" then respond(200, "text/html; charset=utf-8", page(env["SCRIPT_NAME"].to_s))
      when "/data.json" then respond(200, "application/json", JSON.generate(data))
      else
        body, type = @assets[path]
        body ? respond(200, type, body) : respond(404, "text/plain", "not found\n")
      end
      response[1]["set-cookie"] = decision.set_cookie if decision.set_cookie
      response
    end

    # What data.json holds: {time:, interval:, stats: the latest snapshot, series: the history's
    # (History::Points.series), samples: Samples.read's or {error:}, or nil without L1, vm_watch:
    # {reports: VMReports.read's} or nil without a ring}.
    def data
      @lock.synchronize do
        now = @clock.call
        if @taken_at.nil? || now - @taken_at >= @interval
          snapshot = @stats.snapshot
          series, samples = record(snapshot, now.round(3))
          @latest = {time: snapshot[:time], interval: @interval, stats: snapshot, series: series, samples: samples}
          @taken_at = now
        end
        @latest.merge(vm_watch: @vm_watch && {reports: VMReports.read(@vm_watch)})
      end
    end

    private

    def configuration(config)
      case config
      when CLI::Config then config
      when Hash then CLI::Config.from_store_options(config)
      when String then CLI::Config.from_file(config)
      else raise ArgumentError, "config: must be a Hash of store options, a file name or a Strata::CLI::Config"
      end
    end

    # Records snapshot in the history: [its series, the samples].
    def record(snapshot, time)
      unless @l1
        @history.record(snapshot, time)
        return [@history.series, nil]
      end

      @l1.open do |table, _header|
        @history.record(table, snapshot, time)
        [@history.series(table), Samples.read(table)]
      end
    rescue => e # an L1 table that can't be read shows its error in the samples' place, and no series
      [History::Points.series([]), {error: e.is_a?(CLI::L1Table::Refused) ? e.message : "#{e.class}: #{e.message}"}]
    end

    def page(base)
      @page.gsub("{{base}}", CGI.escapeHTML(base))
    end

    def respond(status, type, body)
      [status, HEADERS.merge("content-type" => type, "content-length" => body.bytesize.to_s), [body]]
    end
  end
end
