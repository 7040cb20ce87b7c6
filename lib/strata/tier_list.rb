# frozen_string_literal: true

require "strata/counters"
require "strata/errors"

module Strata
  # The tiers of one stack, top (fastest) first, with their names, and the one place where a
  # tier's failure is handled. Strata::Stack, Strata::SingleFlight and Strata::Dependencies walk
  # the same list and hand every Strata::TierError they catch to #failed, which counts it in the
  # tier's counter row, names the tier in the call's info (an event payload) and passes it to
  # on_error. A failed tier is skipped for that call; nothing here raises a TierError.
  #
  # Frozen after new; shared by every thread of the process.
  class TierList
    # tiers: a Hash of name => tier, top first (at least one).
    # on_error: called as on_error.call(error, tier_name) for each failure; nil ignores them.
    # counters: a Strata::Counters in which each tier with a Tier#counter_row counts its figures
    #   (the tier is handed its row) and the list its failures; nil: none.
    def initialize(tiers, on_error: nil, counters: nil)
      raise ArgumentError, "a stack needs at least one tier" if tiers.empty?

      @names = tiers.keys.freeze
      @tiers = tiers.values.freeze
      @on_error = on_error
      @rows = @tiers.map do |tier|
        row = counters && tier.counter_row
        Counters::Row.new(counters, row).tap { |counted| tier.count_in(counted) } if row
      end.freeze
      freeze
    end

    # The tiers, top first (an Array: hot paths index it directly).
    attr_reader :tiers
    # Their names, in the same order.
    attr_reader :names

    def size
      @tiers.size
    end

    # The index of the first tier (from the top) that declares capability (Tier::CAPABILITIES),
    # or nil.
    def index_of(capability)
      @tiers.index { |tier| tier.capabilities[capability] }
    end

    # For each tier, top first, whether it declares capability.
    def capable(capability)
      @tiers.map { |tier| tier.capabilities[capability] ? true : false }.freeze
    end

    # Reports error, which tier index raised: counted in its row, its name added to
    # info[:failed_tiers] when info is given, handed to on_error.
    def failed(error, index, info = nil)
      @rows[index]&.failed(error)
      name = @names[index]
      (info[:failed_tiers] ||= []) << name if info
      @on_error&.call(error, name)
      nil
    end

    # The block's result, or fallback once a TierError it raised is reported (#failed).
    def safely(index, info = nil, fallback = nil)
      yield
    rescue TierError => error
      failed(error, index, info)
      fallback
    end

    # The block's result (a multi-key read of tier index), or what the tier's healthy servers
    # answered once a TierError it raised is reported (#answered).
    def answering(index, info = nil)
      yield
    rescue TierError => error
      answered(error, index, info)
    end

    # The block's result, or fallback when it raised a TierError, not reported: for a read
    # that a read of the same tier right after repeats, and reports if it fails again.
    def unreported(fallback = nil)
      yield
    rescue TierError
      fallback
    end

    # A multi-key call on tier index failed: reports error (#failed) and returns what the
    # tier's healthy servers did (PartialError), else nothing.
    def answered(error, index, info = nil)
      failed(error, index, info)
      error.is_a?(PartialError) ? error.result : NOTHING
    end

    NOTHING = {}.freeze

    # Deletes key from tier index, best effort: a failure is reported, not raised.
    def drop(key, index)
      @tiers[index].delete(key)
    rescue TierError => error
      failed(error, index)
    end
  end
end
