# frozen_string_literal: true

require "open3"
require "tmpdir"
require "fileutils"

module Strata
  module TestSupport
    # Debian's headless Chromium (script/setup installs the chromium package), run once per
    # page load: --dump-dom prints the DOM after the page's scripts ran for BUDGET_MS of virtual
    # time (timers fire at once, fetches take their real time); --screenshot saves a PNG. Each
    # run has a profile directory of its own (no cookie outlives it), removed after.
    module Chromium
      BINARY = "/usr/bin/chromium"
      BUDGET_MS = 5000
      TIMEOUT = 60 # seconds a run may take before `timeout` kills it
      FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
        "--disable-background-networking", "--virtual-time-budget=#{BUDGET_MS}"].freeze

      module_function

      # The page's DOM (HTML) after its scripts ran.
      def dump_dom(url)
        run("--dump-dom", url)
      end

      # Saves a width x height PNG of the page to file.
      def screenshot(url, file, width: 1280, height: 900)
        run("--screenshot=#{file}", "--window-size=#{width},#{height}", "--hide-scrollbars", url)
        file
      end

      def run(*args)
        raise "#{BINARY} is missing: run script/setup (it installs Debian's chromium)" unless File.executable?(BINARY)

        profile = Dir.mktmpdir("strata-test-chromium")
        out, err, status = Open3.capture3("timeout", TIMEOUT.to_s, BINARY, *FLAGS, "--user-data-dir=#{profile}", *args)
        raise "chromium failed (#{status}): #{err.lines.last(5).join}" unless status.success?

        out
      ensure
        FileUtils.remove_entry(profile) if profile && File.exist?(profile)
      end
    end
  end
end
