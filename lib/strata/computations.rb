# frozen_string_literal: true

module Strata
  # How many computations (Strata::Computation) run in this process, so that a
  # stamped hit outside any of them, the common case, looks nothing up (Engine#noted). A fiber
  # with one running has entered it, and the count, changed under a lock, is read as this thread
  # last wrote it or later, so it is never 0 then. A count left above 0 (an interrupt between
  # #enter and the ensure that leaves) only costs the lookup.
  class Computations
    def initialize
      @lock = Mutex.new
      @running = 0
    end

    # A computation is about to be current in this fiber. (synchronize, not lock and unlock: an
    # interrupt such as Rack::Timeout's Thread#raise between those would leave the lock held,
    # and every later read of the process waiting.)
    def enter
      @lock.synchronize { @running += 1 }
    end

    # One that entered is no longer current.
    def leave
      @lock.synchronize { @running -= 1 }
    end

    # Whether no computation is current in any fiber: nothing a read's stamps would be added to
    # (a read may then skip them: Stack#get_host_plain, #get_multi_plain).
    def idle?
      @running == 0
    end
  end
end
