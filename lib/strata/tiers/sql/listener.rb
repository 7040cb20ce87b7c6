# frozen_string_literal: true

require "strata/errors"

module Strata
  module Tiers
    class SQL
      # A PostgreSQL connection of its own that LISTENs on the invalidation log's channel, for
      # Strata::Poller: #wait returns as soon as a commit that appended to the log notifies, or
      # when its timeout passes. Notifications only wake the poller early; the log is what it
      # reads, so a lost one (a dropped connection, a reconnect) costs at most one timeout.
      #
      # Built from the Active Record configuration of the tier's connection_class, outside its
      # pool: a LISTENing connection must stay checked out and idle, which no pooled one is.
      # Connects on first use and again after a failure. One thread uses it at a time.
      class Listener
        # Seconds a connection attempt may take when the configuration does not say.
        CONNECT_TIMEOUT = 2

        # config: an Active Record configuration hash (host, port, database, username, ...).
        # channel: a plain identifier, the log table's name.
        def initialize(config, channel)
          require "pg"
          @params = connection_params(config)
          @channel = channel
          @connection = nil
        end

        # Waits up to timeout seconds for a notification on the channel: true when one came (and
        # every other pending one is taken too), false when the time passed. Raises
        # Strata::TierError when the connection fails; the next call connects again.
        def wait(timeout)
          connection = (@connection ||= connect)
          return false unless connection.wait_for_notify(timeout)

          nil while connection.wait_for_notify(0) # bound: the notifications already received
          true
        rescue PG::Error => e
          close
          raise TierError.new("Strata L3 listener on #{@channel}: #{e.class}: #{e.message.lines.first&.strip}", tier: :l3)
        end

        # Connects and LISTENs now, unless it does already: notifications of commits from then on
        # wake #wait. Itself; raises as #wait does.
        def listen
          @connection ||= connect
          self
        rescue PG::Error => e
          raise TierError.new("Strata L3 listener on #{@channel}: #{e.class}: #{e.message.lines.first&.strip}", tier: :l3)
        end

        # Closes the connection (it is opened again on the next #wait).
        def close
          connection = @connection
          @connection = nil
          connection&.close
        rescue PG::Error
          nil # closing is best effort
        end

        # In a forked child: forgets the parent's connection without telling the server, which
        # closing it would (the parent keeps using it).
        def discard
          connection = @connection
          @connection = nil
          connection&.socket_io&.reopen(IO::NULL)
        rescue PG::Error, IOError, SystemCallError
          nil
        end

        private

        def connect
          connection = PG::Connection.new(@params)
          connection.exec("LISTEN #{connection.quote_ident(@channel)}")
          connection
        rescue PG::Error
          connection&.close
          raise
        end

        # libpq's parameters from Active Record's names, without the keys libpq does not know.
        def connection_params(config)
          config = config.transform_keys(&:to_sym)
          known = PG::Connection.conndefaults_hash.keys
          params = config.slice(*known)
          params[:dbname] = config[:database] if config[:database]
          params[:user] = config[:username] if config[:username]
          params[:connect_timeout] ||= CONNECT_TIMEOUT
          params.compact
        end
      end
    end
  end
end
