# frozen_string_literal: true

require "strata/clock"
require "net/http"
require_relative "../zipf"

module Strata
  module Bench
    module Cluster
      # One app host's load (Run forks one per host): connections threads, each a keep-alive
      # connection that asks, without pause, for bugs with Zipf-distributed ids, one time in two
      # the API's entry (GET /bugs/:id) and else the bug's page, one of PAGES. It records every
      # request, failed ones included, as one row of RECORD; a request that fails closes its
      # connection, and the next one opens another. No retry: a failure is counted where it
      # happened.
      class Load
        # The fields of a record, in order: when it started (CLOCK_MONOTONIC seconds, shared by
        # every process of the machine), its latency in seconds, ENTRY or PAGE, the bug's id, the
        # change the answer showed (Load.change_of; 0 for the seed's title), the HTTP status (0: no
        # answer) and the Puma worker that answered (X-Worker-Pid), or for a failure the one that
        # answered last on the connection.
        RECORD = %i[started latency kind id change status worker].freeze
        ENTRY = 0
        PAGE = 1
        # The writer's titles ("change 42"): what an answer shows of the last change it saw.
        TITLE = "change %d"
        CHANGE = /change (\d+)/
        OPEN_TIMEOUT = 2
        READ_TIMEOUT = 10

        def self.change_of(body)
          body.to_s[CHANGE, 1].to_i
        end

        # The bug's page: Rails' stock key-based fragments, which load the bug and its tags on
        # every request to make their keys (any store), or fragments named by the bug's id and
        # tagged with it, which load nothing on a hit (a store that keeps tags).
        PAGES = {stock: "/pages/bugs_stock/%d", tagged: "/pages/bugs/%d"}.freeze

        def self.path(kind, id, page)
          (kind == ENTRY) ? "/bugs/#{id}" : format(PAGES.fetch(page), id)
        end

        # headers: what every request sends (the representation's cache, X-Representation-Cache);
        # page: a PAGES key. Runs until the monotonic time stop, at most max_requests per
        # connection.
        def initialize(address:, port:, bugs:, skew:, seed:, connections:, headers:, page:, stop:, max_requests:)
          @address = address
          @port = port
          @bugs = bugs
          @skew = skew
          @seed = seed
          @connections = connections
          @headers = headers
          @page = page
          @stop = stop
          @max_requests = max_requests
        end

        # Every connection's records, one Array of RECORD rows.
        def run
          Array.new(@connections) { |n| Thread.new { connection(@seed + n) } }.flat_map(&:value)
        end

        private

        def connection(seed)
          zipf = Zipf.new(n: @bugs, skew: @skew, seed: seed)
          random = Random.new(seed)
          records = []
          http = nil
          worker = 0
          @max_requests.times do
            started = Clock.monotonic
            break if started >= @stop

            kind = random.rand(2)
            id = zipf.sample + 1
            begin
              http ||= open
              response = http.request(Net::HTTP::Get.new(Load.path(kind, id, @page), @headers))
              worker = response["X-Worker-Pid"].to_i
              records << [started, Clock.monotonic - started, kind, id, Load.change_of(response.body), response.code.to_i, worker]
            rescue IOError, SystemCallError, Timeout::Error, Net::HTTPBadResponse
              records << [started, Clock.monotonic - started, kind, id, 0, 0, worker]
              begin
                http&.finish
              rescue IOError
                nil
              end
              http = nil
            end
          end
          records
        end

        def open
          http = Net::HTTP.new(@address, @port)
          http.open_timeout = OPEN_TIMEOUT
          http.read_timeout = READ_TIMEOUT
          http.max_retries = 0
          http.start
        end
      end
    end
  end
end
