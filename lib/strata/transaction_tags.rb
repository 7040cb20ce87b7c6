# frozen_string_literal: true

require "active_support/isolated_execution_state"
require "strata/dependencies"

module Strata
  # The tags that records (Strata::Model) changed in the database transactions still open in this
  # execution context (a thread, or a fiber when Active Record isolates connections per fiber:
  # ActiveSupport::IsolatedExecutionState, which Active Record's connections follow). Until the
  # transaction commits, those changes are visible to this context only, so a cached value that
  # depends on one of these tags is neither served nor cached here (docs/coherence.md, "Active
  # Record"): the store asks hides_entry? of each stamped entry it reads, and hides? of the stamps
  # of each entry it writes. Other contexts see nothing pending and use the cache as usual.
  #
  # A change is kept with the transaction (Active Record's, real or savepoint) it was made in.
  # When a transaction rolls back, the changes made in it (and in the savepoints it held) are
  # forgotten: nothing is invalidated. When the transaction that runs the after_commit callbacks
  # commits (the outermost one, or one inside a non-joinable transaction), every change of that
  # connection whose transaction has ended and was not rolled back is taken (#committed) and
  # invalidated by the model. With nothing pending, the context holds nil.
  #
  # Not shared: each context has its own, and only that context uses it.
  class TransactionTags
    KEY = :strata_transaction_tags

    # One change: the connection and transaction it was made in, the store its tags go to.
    Change = Struct.new(:connection, :transaction, :store, :tags, :stale_for)

    # How many contexts have tags pending, in this process. Every tagged read asks for #current,
    # and with none pending anywhere (the usual case) the answer needs no look into the context's
    # state, which costs a 4-tag hit about a sixth of its time. A context that adds its first
    # change counts itself under the lock before it reads, so it never sees 0 while it has some;
    # a count left above 0 (a context whose tags were dropped without #settle) only costs the look.
    @contexts = 0
    @contexts_lock = Mutex.new

    class << self
      # This context's pending tags, or nil when there are none.
      def current
        return nil if @contexts == 0

        ActiveSupport::IsolatedExecutionState[KEY]
      end

      # Whether stamps ([[tag_id, version], ...]) name a tag that a transaction open in this
      # context changed: the entry they stamp is then a miss, and is not written.
      def hides?(stamps)
        return false if stamps.empty?

        pending = current
        pending ? pending.include_any?(stamps) : false
      end

      # Whether a transaction open in this context changed one of tag ids (a fetch's own tags:):
      # the fetch then neither reads nor writes its key.
      def hides_ids?(ids)
        pending = current
        pending ? pending.include_ids?(ids) : false
      end

      # hides? for a decoded Strata::Entry: its stamps are unpacked only when something is pending.
      def hides_entry?(entry)
        pending = current
        pending ? pending.include_any?(entry.stamps) : false
      end

      # For StrataStore#invalidate_tags called while this context has an open transaction: on
      # each Active Record connection of the context whose current transaction is open and
      # joinable, the tags are recorded as that transaction's change (#add), and a CommitHook
      # is enrolled in it, which invalidates them through store once it commits; a rollback
      # forgets them. Whether any was: the caller then bumps nothing now. A bump made before
      # the data commits would let a reader refill from the old rows under the new versions,
      # for good. A non-joinable transaction (the one a test with use_transactional_tests runs
      # in) commits nothing its children do not, so it defers nothing: a change's after_commit
      # runs inside it and invalidates at once, as after a commit in production.
      # stale_for: a soft invalidation's window (seconds), or nil.
      def defer(store, tags, stale_for = nil)
        return false unless defined?(::ActiveRecord::Base)

        deferred = false
        ::ActiveRecord::Base.connection_handler.connection_pool_list(:all).each do |pool| # bound: the app's pools
          connection = joinable_connection(pool)
          next unless connection

          add(connection, connection.current_transaction, store, tags, stale_for)
          connection.add_transaction_record(CommitHook.new(connection))
          deferred = true
        end
        deferred
      end

      # pool's connection in this context when it has a transaction open that is joinable (not
      # a test's own: see #defer), else nil.
      def joinable_connection(pool)
        connection = pool.active_connection?
        connection if connection.respond_to?(:transaction_open?) && connection.transaction_open? &&
          connection.current_transaction.joinable?
      end

      # For a write or delete of keys through store whose SQL tier joined the app's open
      # transaction on connection: should that transaction roll back, the tiers above SQL would
      # keep what its SQL rows no longer say. A RollbackHook enrolled in it takes them back
      # through store then (StrataStore#retract); a commit needs nothing (the log rows commit
      # with it).
      def retract_on_rollback(connection, store, keys)
        connection.add_transaction_record(RollbackHook.new(store, keys))
      end

      # Records that a change made in transaction (open on connection) touched tags (Strings),
      # to be invalidated through store when it commits.
      def add(connection, transaction, store, tags, stale_for = nil)
        pending = ActiveSupport::IsolatedExecutionState[KEY]
        unless pending
          @contexts_lock.synchronize { @contexts += 1 }
          pending = ActiveSupport::IsolatedExecutionState[KEY] = new
        end
        pending.add(Change.new(connection, transaction, store, tags, stale_for))
      end

      # Forgets the changes of transactions that rolled back.
      def rolled_back
        current&.prune
        settle
      end

      # The changes made through connection that committed, [store, stale_for] => [tag, ...],
      # now forgotten. Changes in transactions still open stay.
      def committed(connection)
        pending = current
        return {} unless pending

        taken = pending.take(connection)
        settle
        taken
      end

      # Invalidates the tags of changes (from #committed) through their stores, soft ones with
      # their window.
      def invalidate(changes)
        changes.each do |(store, stale_for), tags|
          stale_for ? store.invalidate_tags(tags, soft: true, stale_for: stale_for) : store.invalidate_tags(tags)
        end
      end

      private

      # Drops the context's object when nothing is pending any more.
      def settle
        pending = current
        return unless pending && pending.empty?

        ActiveSupport::IsolatedExecutionState.delete(KEY)
        @contexts_lock.synchronize { @contexts -= 1 }
      end
    end

    # What Active Record asks of an object enrolled in a transaction (add_transaction_record)
    # besides committed! (after the commit) and rolledback! (after a rollback); a savepoint's
    # enrolled objects move to its parent when it is released.
    module Enrolled
      def trigger_transactional_callbacks?
        true
      end

      def before_committed!
      end
    end

    # What #defer enrolls in a transaction. One per deferred call; the first to run after a
    # commit invalidates every change of the connection, the others find none left.
    class CommitHook
      include Enrolled

      def initialize(connection)
        @connection = connection
      end

      def committed!(should_run_callbacks: true)
        return unless should_run_callbacks

        TransactionTags.invalidate(TransactionTags.committed(@connection))
      end

      def rolledback!(force_restore_state: false, should_run_callbacks: true)
        TransactionTags.rolled_back
      end
    end

    # What #retract_on_rollback enrolls.
    class RollbackHook
      include Enrolled

      def initialize(store, keys)
        @store = store
        @keys = keys
      end

      def committed!(should_run_callbacks: true)
      end

      def rolledback!(force_restore_state: false, should_run_callbacks: true)
        @store.send(:retract, @keys) if should_run_callbacks # private: the store's, not the app's
      end
    end

    def initialize
      @changes = []
      @ids = {} # tag id => true, for every pending change
    end

    def add(change)
      @changes << change
      change.tags.each { |tag| @ids[Dependencies.tag_id(tag)] = true }
      self
    end

    def include_any?(stamps)
      stamps.any? { |id, _| @ids.key?(id) }
    end

    def include_ids?(ids)
      ids.any? { |id| @ids.key?(id) }
    end

    def empty?
      @changes.empty?
    end

    # Drops the changes whose transaction rolled back (a savepoint rolled back, or one a rolled
    # back transaction held) or was lost with its connection.
    def prune
      kept = @changes.reject { |change| dropped?(change.transaction) }
      reset(kept) unless kept.size == @changes.size
    end

    # See TransactionTags.committed: the changes of connection whose transaction has ended. That
    # is every change of the transaction whose after_commit runs (savepoints released in it
    # included), whether it is the outermost or a non-joinable transaction's child, as in tests
    # that run in a transaction.
    def take(connection)
      ended, open = @changes.partition { |change| change.connection.equal?(connection) && change.transaction.state.finalized? }
      return {} if ended.empty?

      reset(open)
      taken = {}
      ended.each { |change| (taken[[change.store, change.stale_for]] ||= []).concat(change.tags) unless dropped?(change.transaction) }
      taken.transform_values(&:uniq)
    end

    private

    def dropped?(transaction)
      state = transaction.state
      state.rolledback? || state.invalidated?
    end

    def reset(changes)
      @changes = changes
      @ids = {}
      changes.each { |change| change.tags.each { |tag| @ids[Dependencies.tag_id(tag)] = true } }
    end
  end
end
