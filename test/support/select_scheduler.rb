# frozen_string_literal: true

require "io/wait"

module Strata
  module TestSupport
    # The least fiber scheduler that runs non-blocking fibers on one thread with IO.select, for
    # tests that check a wait yields to the other fibers instead of blocking the thread. It
    # serves io_wait, kernel_sleep, block and unblock (from this thread only); close runs every
    # fiber to its end. Not for production: no timers beyond the waits, and unblock from another
    # thread is not supported.
    class SelectScheduler
      def initialize
        @readers = {} # io => fiber
        @writers = {} # io => fiber
        @wakeups = {} # fiber => monotonic time
        @ready = []
      end

      def fiber(&)
        fiber = Fiber.new(blocking: false, &)
        fiber.resume
        fiber
      end

      # The events ready, or false when timeout seconds passed first.
      def io_wait(io, events, timeout)
        fiber = Fiber.current
        @readers[io] = fiber if events.anybits?(IO::READABLE)
        @writers[io] = fiber if events.anybits?(IO::WRITABLE)
        @wakeups[fiber] = now + timeout if timeout
        Fiber.yield
      ensure
        @readers.delete(io)
        @writers.delete(io)
        @wakeups.delete(fiber)
      end

      def kernel_sleep(duration = nil)
        block(:sleep, duration)
      end

      def block(_blocker, timeout = nil)
        @wakeups[Fiber.current] = now + timeout if timeout
        Fiber.yield
      ensure
        @wakeups.delete(Fiber.current)
      end

      def unblock(_blocker, fiber)
        @ready << fiber
      end

      def close
        run
      end

      private

      # Bound: runs until no fiber waits; each round either resumes a fiber or waits for one.
      def run
        until @readers.empty? && @writers.empty? && @wakeups.empty? && @ready.empty?
          @ready.shift.resume until @ready.empty?
          wait = @wakeups.values.min
          timeout = wait && [wait - now, 0].max
          readable, writable = IO.select(@readers.keys, @writers.keys, [], timeout)
          resume_ready(readable, writable)
        end
      end

      def resume_ready(readable, writable)
        due = @wakeups.select { |_fiber, time| time <= now }.keys
        ready = {}
        readable&.each { |io| ready[@readers[io]] = (ready[@readers[io]] || 0) | IO::READABLE }
        writable&.each { |io| ready[@writers[io]] = (ready[@writers[io]] || 0) | IO::WRITABLE }
        ready.each { |fiber, events| fiber.resume(events) if fiber.alive? }
        due.each { |fiber| fiber.resume(false) if fiber.alive? && !ready.key?(fiber) }
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end
    end
  end
end
