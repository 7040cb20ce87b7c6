/*
 * fill_locks.h - the host's fill locks: a region of the L1 table file (table.h, FILE LAYOUT) in
 * which a process says "I am computing the value of this key" (Strata::SingleFlight, host
 * single-flight), so that the host's other processes and threads wait for its value instead of
 * computing it too. fill_locks.c implements the region; table.c places it in the file and
 * hashes keys into it (strata_fill_lock, strata_fill_unlock).
 *
 * WHY A REGION OF ITS OWN
 *   The lock used to be an item of the table (an add of "\0strata:fill:<key>" with a TTL, then
 *   a delete): two writes into the shard's log per cold fetch, beside the one of the value. A
 *   lock word here is one compare-and-swap to take and one to give back, and writes nothing to
 *   the log, the index or a shard lock.
 *
 * CONCURRENCY MODEL
 *   The region is STRATA_FILL_LOCK_SLOTS words, direct-mapped: a key's lock is the one word its
 *   hash picks. Every change is a compare-and-swap against the exact word read (sequentially
 *   consistent), so of two callers that read the same word, at most one changes it. Nobody
 *   waits in here: a caller that finds the lock held is told so and decides for itself how long
 *   to poll for the value (fill_wait, in Ruby).
 *
 * REGION LAYOUT (at the geometry's fill_locks_offset; u64 words in the CPU's byte order)
 *   STRATA_FILL_LOCK_SLOTS words, each 0 (free) or
 *     tag (bits 40..63): 24 bits of the key's hash not used to pick the word
 *     changed (bit 39, STRATA_FILL_LOCK_CHANGED): the key was written or deleted while the
 *       word was held (strata_fill_lock_mark)
 *     expires (bits 0..38): when the lock lapses, in ms since the file's created_ms (unix ms,
 *       CLOCK_REALTIME, the clock of item expiry); always >= 1, so a held word is never 0
 *   The word for hash h is h >> 24 (mod the slot count), its tag h & 0xFFFFFF. (Layout 6 files
 *   written before bit 39 meant "changed" never set it: expiries stay below 2^39 ms, 17 years
 *   after the build.)
 *
 * INVARIANTS
 *   - A key's lock has at most one live holder: taking it moves the word from 0, or from a
 *     lapsed word, to tag | expires by compare-and-swap; two takers of one word cannot both win.
 *     A new word always differs from the lapsed one it replaces (its expiry is later than now,
 *     the lapsed one's is not), so a taker that read the lapsed word loses to one that replaced
 *     it.
 *   - Giving back moves the word from the holder's own token (the word it wrote) to 0; a lock
 *     that lapsed and was taken by another caller has another word, which the late holder leaves
 *     alone.
 *   - A word is read once (atomic load) and only its copy is decoded. A word whose expiry lies
 *     more than STRATA_FILL_LOCK_MAX_TTL_MS ahead can't have been written by a taker (they clamp
 *     their TTL to it): damage, read as lapsed and taken over.
 *   - Changes win over fills on one host (docs/coherence.md, "The ordering rule"): a write or
 *     delete of a key marks its word changed when the word carries the key's tag, before it
 *     takes the key's shard lock; a fill's add (strata_write's fill_token) checks the mark under
 *     that lock and is refused when its holder's word is marked. So a fill that read before a
 *     write or delete either stored its value before the change's shard lock (which then
 *     replaces or removes it) or is refused. Only the holder's own word counts: a fill whose
 *     lock lapsed and was taken over, or that computes without one (the word is another
 *     key's), adds as before.
 *
 * SHARED STRUCTS: GUARD, WHAT A READER MAY SEE STALE, HOLDER DEATH
 *   lock word: guarded by compare-and-swap only. A taker may read a word a moment before its
 *     holder gives it back; it then reports the lock held, and its caller polls for the value
 *     and retakes the lock at its next poll.
 *   death: a holder killed before giving the lock back leaves its word, which lapses at its
 *     expiry (the fill_wait it was taken for); until then the key's other fetchers poll for a
 *     value that does not come, then take the lock, as they would after any holder that took
 *     too long.
 *
 * CAVEATS (each with its remedy)
 *   two keys, one word: keys whose hashes pick the same word while both are being filled
 *     collide. The second taker is told the word is another key's (STRATA_FILL_LOCK_OTHER) and
 *     computes without a lock, as a host without single-flight would: what it writes is still
 *     an add that gives way to a newer value. Keys whose 24-bit tags also agree wait on each
 *     other's fill, up to fill_wait. With 8,192 words and 100 fills in flight, about one fill in
 *     80 goes unlocked. Remedy: none needed; the count is in the handle's stats
 *     (fill_lock_collisions).
 *   clock set back: a lock taken before the change lives longer by the step, up to the callers'
 *     own fill_wait, after which they compute anyway. A clock set back to before the file was
 *     built reads as the file's birth.
 */
#ifndef STRATA_FILL_LOCKS_H
#define STRATA_FILL_LOCKS_H

#include <stdint.h>

#define STRATA_FILL_LOCK_SLOTS 8192u
#define STRATA_FILL_LOCK_BYTES (STRATA_FILL_LOCK_SLOTS * 8u) /* 64 KiB, whole pages */
/* A lock word's expiry bits, and a token's (the word's tag is the key's: it need not travel). */
#define STRATA_FILL_LOCK_EXPIRES_MASK ((1ULL << 39) - 1)
/* Set in a held word when its key was written or deleted meanwhile. */
#define STRATA_FILL_LOCK_CHANGED (1ULL << 39)
/* The longest a lock is taken for (1 hour): fill_wait beyond it is clamped to it. */
#define STRATA_FILL_LOCK_MAX_TTL_MS (3600u * 1000u)

typedef enum strata_fill_lock_answer {
    STRATA_FILL_LOCK_TAKEN, /* the caller holds the key's lock; *token gives it back */
    STRATA_FILL_LOCK_HELD,  /* a live lock of the key (or of a key with its word and tag) */
    STRATA_FILL_LOCK_OTHER  /* the word is live for another key: no lock to be had */
} strata_fill_lock_answer;

/*
 * Take the lock of the key whose hash is hash, for ttl_ms (1..STRATA_FILL_LOCK_MAX_TTL_MS;
 * clamped into that range), now being ms since the file's created_ms. On
 * STRATA_FILL_LOCK_TAKEN *token is the expiry written (never 0), for strata_fill_lock_give.
 * Lock-free: a compare-and-swap lost to another taker is retried (at most 4 times, then HELD).
 */
strata_fill_lock_answer strata_fill_lock_take(uint8_t *region, uint64_t hash, uint64_t now, uint64_t ttl_ms,
                                              uint64_t *token);

/* Give back the lock that token (strata_fill_lock_take's) took for hash: 1 when it was still
 * ours (marked changed or not) and is free now, 0 when it had lapsed (and may have been taken
 * since by another caller, whose it stays) or token is not a token. */
int strata_fill_lock_give(uint8_t *region, uint64_t hash, uint64_t token);

/* Marks the word of hash changed when it carries hash's tag (held, or lapsed and not taken
 * over): a write or delete of the key, before it takes the key's shard lock. Lock-free; a
 * compare-and-swap lost to a taker or giver is retried (at most 4 times). */
void strata_fill_lock_mark(uint8_t *region, uint64_t hash);

/* Whether the lock token took for hash is still the word's, marked changed since: the fill of
 * its holder is then refused. */
int strata_fill_lock_marked(const uint8_t *region, uint64_t hash, uint64_t token);

#endif
