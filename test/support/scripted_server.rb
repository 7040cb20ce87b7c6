# frozen_string_literal: true

require "open3"
require "tmpdir"
require "support/memcached_process"

module Strata
  module TestSupport
    # A throwaway database server of a test's own, driven through one of our scripts (script/postgres,
    # script/mariadb), which bound every wait. Each script takes start DIR PORT (printing the URL),
    # crash DIR, restart DIR PORT and stop DIR. A subclass names its SCRIPT, and its class answers
    # url, the shared server bin/test started, from ENV_URL.
    class ScriptedServer
      # The shared server's URL; raises the subclass's MISSING_URL when none was started.
      def self.url
        url = ENV[self::ENV_URL]
        raise self::MISSING_URL if url.nil? || url.empty?

        url
      end

      attr_reader :port, :url

      def initialize(port = MemcachedProcess.free_port)
        @port = port
        @dir = nil
        @url = nil
      end

      # Makes the server's files in a new directory, starts it and creates its database; the URL.
      def start
        @dir = Dir.mktmpdir("strata-#{File.basename(self.class::SCRIPT)}-test")
        @url = script("start", @dir, @port.to_s).strip
      end

      # Stops the server at once, as a crash would; its files stay for #restart.
      def crash
        script("crash", @dir)
      end

      def restart
        script("restart", @dir, @port.to_s)
      end

      # Stops the server (if it runs) and removes its files. Safe to call twice.
      def destroy
        return unless @dir

        script("stop", @dir)
        @dir = nil
      end

      private

      def script(*args)
        out, err, status = Open3.capture3(self.class::SCRIPT, *args)
        raise "#{File.basename(self.class::SCRIPT)} #{args.first} failed: #{err}" unless status.success?

        out
      end
    end
  end
end
