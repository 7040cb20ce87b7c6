# frozen_string_literal: true

module Strata
  # Root of every error Strata raises on purpose.
  class Error < StandardError; end

  # A tier could not do its job: timeout, connection, corrupt data. The stack skips the tier
  # for that call and reports the error; it never reaches the app's request.
  class TierError < Error
    # The tier that failed (:l1, :l2, :l3) when the raiser knows it.
    attr_reader :tier
    # The server ("host:port") that failed or could not be reached, for a tier of several
    # servers (memcached); nil when the failure is not one server's.
    attr_reader :server

    def initialize(message = nil, tier: nil, server: nil)
      @tier = tier
      @server = server
      super(message)
    end
  end

  # A failure that may pass if tried again later: a busy lock, a timeout.
  class RetryableError < TierError; end

  # A multi-key operation that reached only some of its servers. result holds what the others
  # answered (a Hash, as the operation returns it); cause is the first failure.
  class PartialError < TierError
    attr_reader :result

    def initialize(message = nil, result:, tier: nil, server: nil)
      @result = result
      super(message, tier: tier, server: server)
    end
  end

  # A tier's file or server holds data that fails validation.
  class CorruptError < TierError; end

  # A value is larger than a tier can hold. Nothing was written.
  class ValueTooLargeError < Error; end

  # An entry's computation read entries of more tags than an entry can carry stamps of
  # (Entry::MAX_STAMPS). The store reports it and does not cache the entry.
  class TooManyStampsError < Error; end

  # A file Strata was asked to map belongs to another user or is writable by group or world.
  class UnsafeFileError < Error; end

  # Code that was to leave Ruby's VM caches alone invalidated them (VMWatch's RSpec helper).
  # report: the VMWatch::Report, whose message is this error's.
  class VMCacheInvalidated < Error
    attr_reader :report

    def initialize(report)
      @report = report
      super(report.message)
    end
  end
end
