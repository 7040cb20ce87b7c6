# frozen_string_literal: true

module Strata
  module Meta
    # Predicates over the lease flags of an mg reply (W, X, Z), for any struct with won, stale and
    # lease_sent members: the parsed reply and the client's lease result share them.
    module LeaseFlags
      # W: this caller won the right to refill.
      def won?
        won
      end

      # X: the item was invalidated; serve it only while someone refills.
      def stale?
        stale
      end

      # Z: another caller already holds the win.
      def lease_sent?
        lease_sent
      end
    end
  end
end
