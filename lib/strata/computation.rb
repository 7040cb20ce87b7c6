# frozen_string_literal: true

require "strata/entry"

module Strata
  # One computation under way in a fiber: a fetch, a fetch_multi or a fragment. It holds the keys
  # whose entries it computes, its single-flight claims on them (Strata::ReadThrough: the host
  # lock, the lease, the first read), the stamps its result will carry, and the computation it
  # runs inside (#outer). Strata::Engine keeps the innermost one in its fiber-local slot.
  #
  # A fetch's computation starts when its read-through does and computes (#computing?) only
  # once that read missed and its block runs; fetch_multi's and a fragment's compute from the
  # start. While one computes, every stamped entry read in the fiber adds its stamps to it
  # (#read): its result then misses once any of them is invalidated. When it ends, the one
  # around it takes its stamps too (Engine#computing).
  #
  # Invariant: only the innermost computation of a fiber may be reading rather than computing
  # (no app code runs while a fetch reads), so every outer one computes.
  #
  # Used by one fiber only.
  class Computation
    # The String key of the entry it computes, or an Array of them (fetch_multi).
    attr_reader :keys
    # The computation this one runs inside, or nil.
    attr_reader :outer
    # True when its result must not be cached: it shows data older than its stamps (a record
    # changed between its load and the reading of the stamps, StrataStore#fragment). Passed to
    # the computation around it, which shows that data too.
    attr_reader :spoiled
    # A fragment's [name, tags], whose Strata::Model records are checked against the database
    # when its result is written (StrataStore#stamps_for), or nil.
    attr_accessor :loaded
    # fetch_multi: true until its own read of its keys, which reads the misses through.
    attr_accessor :unread
    # Its read-throughs: a fetch's one, fetch_multi's Hash by key (which its read adds to), or nil.
    attr_reader :claims
    # A fragment's: true once its read found it soft-stale or expired and it took the claim to
    # render it again, which the fragment gives back when it ends.
    attr_accessor :revalidating
    # A fragment's expired entry that its fail_safe: may answer should its render raise, or nil.
    attr_accessor :last_good

    # keys: as #keys. claims: a ReadThrough (a fetch's), a Hash of key => ReadThrough
    # (fetch_multi's, filled as it reads its misses through), or nil (a fragment).
    def initialize(keys, outer, claims = nil)
      @keys = keys
      @outer = outer
      @claims = claims
      @stamps = nil # made on first use: most computations have none
      @computing = false
      @spoiled = false
      @unread = false
      @revalidating = false
      @last_good = nil
    end

    # This computation's read-through of key, or nil.
    def claim(key)
      claims = @claims
      return nil unless claims
      return claims[key] if claims.is_a?(Hash)

      claims if claims.key == key
    end

    # Its block begins: stamps ([[tag_id, version], ...]) are the versions read before it.
    def start(stamps)
      @stamps = stamps.to_h unless stamps.empty?
      @computing = true
    end

    # Its block has ended.
    def stop
      @computing = false
    end

    def computing?
      @computing
    end

    def spoil!
      @spoiled = true
    end

    # Whether a write of key is this computation's result.
    def for?(key)
      @keys.is_a?(String) ? @keys == key : @keys.include?(key)
    end

    # A current stamped entry's bytes, read under key while this computation runs: it depends
    # on their stamps, unless key is one of its own (fetch_multi's hits): then the computation
    # around it used the value. key nil: not known, a dependency.
    def read(key, bytes)
      words = Entry.stamp_words(bytes)
      for?(key) ? @outer&.add(words) : add(words)
    end

    # Adds stamp words ([tag_id, version, ...], Entry.stamp_words) to what this computation
    # depends on.
    def add(words)
      stamps = (@stamps ||= {})
      index = 0
      while index < words.size
        stamps[words[index]] = words[index + 1] unless stamps.key?(words[index])
        index += 2
      end
    end

    # [[tag_id, version], ...], frozen empty when there are none.
    def stamps
      @stamps ? @stamps.to_a : Entry::NO_STAMPS
    end

    # stamps flat, as #add takes them.
    def words
      @stamps ? @stamps.to_a.flatten : Entry::NO_STAMPS
    end
  end
end
