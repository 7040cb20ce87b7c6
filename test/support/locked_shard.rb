# frozen_string_literal: true

module Strata
  # A real tier failure on demand: another thread holds the shard lock of a key, so every write of
  # that key through the table times out (set/add answer false; incr and decr raise
  # Strata::RetryableError) and makes the key read as a miss; delete still succeeds that way.
  # Reads take no lock and go on working.
  module LockedShard
    def with_shard_locked(table, key)
      shard = table._shard_for(key)
      held = Queue.new
      release = Queue.new
      holder = Thread.new do
        held << table._hold_shard_lock(shard)
        release.pop
        table._release_shard_lock(shard)
      end
      raise "could not take the shard lock" unless held.pop

      yield
    ensure
      release&.push(true)
      holder&.join
    end
  end
end
