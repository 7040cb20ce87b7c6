# frozen_string_literal: true

require "strata/clock"
require "strata/tiers/sql"
require "support/waiting"

module Strata
  module TestSupport
    # The SQL tier when its database server dies under it, for each server the tier is tested on:
    # on a throwaway server of the test's own (a ScriptedServer; the shared one stays up), crashed
    # and then started again. A test class that includes it defines record (an abstract Active
    # Record class), server (a new ScriptedServer), connection_config(url) (record's database
    # config, bounding a connection attempt) and server_label (the adapter name error messages
    # carry).
    module SqlServerFault
      include Strata::Waiting

      # Seconds an operation may take to fail against a dead server, and to come back after a restart.
      BOUND = 10

      def setup
        @server = server
        record.establish_connection(connection_config(@server.start))
        Strata::Tiers::SQL.create_table!(record)
        @tier = Strata::Tiers::SQL.new(connection_class: record)
      end

      def teardown
        record.remove_connection if @server
        @server&.destroy
      end

      def test_a_crashed_server_raises_tier_errors_and_keeps_what_was_committed
        keys = (1..20).map { |i| "committed-#{i}" }
        keys.each { |key| assert @tier.set(key, "value of #{key}") }

        @server.crash
        operations = {
          get: -> { @tier.get(keys.first) },
          get_multi: -> { @tier.get_multi(keys) },
          set: -> { @tier.set("during", "v") },
          add: -> { @tier.add("during", "v") },
          delete: -> { @tier.delete(keys.last) },
          cleanup: -> { @tier.cleanup }
        }
        operations.each do |name, operation|
          started = Strata::Clock.monotonic
          error = assert_raises(Strata::TierError, name) { operation.call }
          assert_operator Strata::Clock.monotonic - started, :<, BOUND, "#{name} failed within #{BOUND}s"
          assert_equal :l3, error.tier
          assert_match(/Strata L3 #{server_label}/, error.message)
        end

        @server.restart
        back = wait_until(BOUND) do
          @tier.get(keys.first)
        rescue Strata::TierError
          nil
        end
        assert_equal "value of #{keys.first}", back, "operations resume after the restart"
        assert_equal keys.to_h { |key| [key, "value of #{key}"] }, @tier.get_multi(keys), "every committed entry survived"
        assert_nil @tier.get("during"), "nothing was written while the server was down"
        assert @tier.set("after", "v")
        assert_equal "v", @tier.get("after")
      end
    end
  end
end
