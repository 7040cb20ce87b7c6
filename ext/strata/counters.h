/*
 * counters.h - the host's counters: a region of the L1 table file (table.h, FILE LAYOUT) in
 * which every process that maps the file adds to figures that any process, the app's or
 * `strata stats`, can sum. counters.c implements the region; table.c places it in the file and
 * keeps each handle's claim.
 *
 * CONCURRENCY MODEL
 *   The region is an array of STRATA_COUNTER_SLOTS slots. A process claims one slot, the first
 *   time it counts anything, with a compare-and-swap of the slot's owner word (0 or a dead pid
 *   to its own pid), and from then on only that process writes the slot's counter words: plain
 *   relaxed-atomic loads and stores, no locked instruction. Threads of the owner share the slot;
 *   a Ruby process counts with the GVL held, so they do not lose increments in practice (a call
 *   running without the GVL may). Readers take no lock: they load every word of every slot
 *   (relaxed) and add them up. Nobody ever waits.
 *
 * REGION LAYOUT (at the geometry's counters_offset; u64 words in the CPU's byte order)
 *
 *   offset 0       region header, 4096 bytes:
 *                    u64 unslotted   processes that found no free slot (atomic add); their
 *                                    counts are kept per process and missing from the sums
 *                    u64 polled_until  not a count: until when (unix ms, CLOCK_REALTIME) the
 *                                    host's poller vouches for the table's POLLED items
 *                                    (table.h, POLLED ITEMS); 0 = never (a file from a build
 *                                    before it, whose bytes here were zero, vouches for none)
 *                    the rest is zero
 *   offset 4096    STRATA_COUNTER_SLOTS slots of STRATA_COUNTER_SLOT_BYTES (1024), each:
 *                    u64 owner       pid of the process that claimed it; 0 = never claimed or
 *                                    released at close
 *                    u64 claims      times the slot was claimed (any claimer, atomic add)
 *                    u64 unused[6]
 *                    u64 counter[STRATA_COUNTERS]   indexed by enum strata_counter
 *
 *   A slot is 16 cache lines and starts on one, so two owners never write the same line.
 *
 * INVARIANTS
 *   - Counter words only grow: an owner adds, nobody subtracts or resets. A slot keeps its
 *     counts when its owner closes the table or dies (kill -9 included), and the next claimer
 *     adds to them, so a host's sums never go down while the file lives (a rebuild starts a new
 *     file at zero).
 *   - A slot has at most one owner: the owner word moves 0 -> pid at a claim, dead pid -> pid at
 *     a re-claim, pid -> 0 at the owner's release, each by compare-and-swap against the value
 *     read, so two claimers never both win it.
 *   - Values read from the file are copied once and validated before use: an owner word that is
 *     not a plausible pid (0 < owner <= INT32_MAX) reads as a dead owner, and is never handed to
 *     kill(2) (kill(-1, 0) would probe every process).
 *
 * SHARED STRUCTS: GUARD, WHAT A READER MAY SEE STALE, HOLDER DEATH
 *   owner word: guarded by compare-and-swap only. A reader may see a pid that died a moment
 *     ago; it then counts that slot as a live process once more, harmlessly.
 *   counter words: written by the slot's owner only. A reader may see a word just before an
 *     add lands, or words of one slot from slightly different moments: every sum is a lower
 *     bound that is at most the adds in flight behind, never a torn or decreasing value (each
 *     word is one aligned 64-bit load).
 *   death: an owner that dies leaves its pid in the owner word and its counts in place; a
 *     claimer that finds the pid gone (kill(pid, 0) fails with ESRCH) takes the slot over.
 *
 * CAVEATS (each with its remedy)
 *   fork: a child starts without a slot (the handle's claim lives in a MADV_WIPEONFORK page) and
 *     claims its own at its first count. Kernels without MADV_WIPEONFORK (before 4.14): the child
 *     counts into its parent's slot, racing the parent's adds (some increments may be lost; the
 *     counts still land on the host). Remedy: a newer kernel.
 *   all slots taken: a process that finds no free slot counts into a private page and adds 1
 *     to unslotted; its figures are missing from the sums, which unslotted says. Remedy: fewer
 *     processes per table (128 at a time), or let dead ones be reaped (a zombie's pid still
 *     holds its slot).
 *   PID namespaces: the owner word is a pid in the claimer's namespace. Processes in different
 *     PID namespaces sharing one file could take a live owner for dead and share its slot
 *     (racing adds; counts still land). Remedy: one PID namespace per table file.
 *   pid reuse: a dead owner whose pid was reused by an unrelated process keeps its slot until
 *     that process exits. Costs a slot, never a count.
 */
#ifndef STRATA_COUNTERS_H
#define STRATA_COUNTERS_H

#include <stdint.h>
#include <sys/types.h>

#define STRATA_COUNTER_SLOTS 128
#define STRATA_COUNTER_SLOT_BYTES 1024u
#define STRATA_COUNTER_HEADER_BYTES 4096u
#define STRATA_COUNTER_SLOT_HEADER_WORDS 8
#define STRATA_COUNTERS 120 /* counter words per slot */
#define STRATA_COUNTERS_BYTES (STRATA_COUNTER_HEADER_BYTES + STRATA_COUNTER_SLOTS * STRATA_COUNTER_SLOT_BYTES)

/*
 * Where each figure lives in a slot. Three tier rows of STRATA_TIER_WORDS words (l1, memcached,
 * sql), then the store's figures, then one row of STRATA_OP_WORDS per operation. Words not
 * named are unused (zero) and left for later figures: a new name in an unused word is no layout
 * change. The names (strata_counter_name) are what Ruby shows.
 *
 *   tier row     hits, misses: reads of a cache key that found / did not find a live entry
 *                writes: entries stored; writes_refused: writes not stored (a full lock
 *                wait, a value too large, an add or cas that lost); deletes: entries removed;
 *                evictions: live entries dropped to make room (L1's, and the SQL tier's expiry
 *                passes over max_size or max_entries);
 *                errors_timeout / errors_connection / errors_other: tier failures by kind;
 *                memcached's row only, after those: gutter_reads, gutter_writes,
 *                gutter_deletes: requests for keys whose server was down, sent to a gutter
 *                server instead (a key each, the stack's own keys included), and the deletes
 *                of those gutter copies at the server's recovery; recovery_deletes: keys
 *                deleted on a server when it answered again (its recovery log: the keys
 *                changed while it was down); recovery_flushes: servers flushed at recovery (a
 *                log that overflowed, or a flush while down);
 *                sql's row only, after the common figures: expiry_passes: expiry passes run
 *                (Tiers::SQL, every expire_every writes of a process); expired: rows those
 *                passes deleted because their TTL had passed or they outlived max_age (the
 *                rows deleted to keep within budget are the row's evictions)
 *   store        fills: fetch blocks run to compute a missing value, fill_us their time;
 *                lock_waits / lock_wait_us: read-throughs that waited on another process's
 *                host lock, and for how long; lease_waits / lease_wait_us: the same for a
 *                memcached lease; stale_hits: stale values served while another caller
 *                refills; invalidations: invalidate_tags calls; versions_bumped: tags they
 *                bumped
 *   operation    count: calls; timed: calls whose time was measured; us: their total time in
 *                microseconds (mean = us / timed). read_hit: a read or fetch that found a
 *                value; fetch_miss: a fetch that ran its block; write; delete.
 */
#define STRATA_TIER_WORDS 16
#define STRATA_OP_WORDS 4

enum strata_tier_row { STRATA_ROW_L1 = 0, STRATA_ROW_MEMCACHED = 1, STRATA_ROW_SQL = 2 };

enum strata_tier_counter {
    STRATA_TC_HITS,
    STRATA_TC_MISSES,
    STRATA_TC_WRITES,
    STRATA_TC_WRITES_REFUSED,
    STRATA_TC_DELETES,
    STRATA_TC_EVICTIONS,
    STRATA_TC_ERRORS_TIMEOUT,
    STRATA_TC_ERRORS_CONNECTION,
    STRATA_TC_ERRORS_OTHER,
    STRATA_TC_COUNT
};

/* memcached's row goes on after the common figures. */
enum strata_memcached_counter {
    STRATA_MC_GUTTER_READS = STRATA_TC_COUNT,
    STRATA_MC_GUTTER_WRITES,
    STRATA_MC_GUTTER_DELETES,
    STRATA_MC_RECOVERY_DELETES,
    STRATA_MC_RECOVERY_FLUSHES,
    STRATA_MC_END
};
_Static_assert(STRATA_MC_END <= STRATA_TIER_WORDS, "memcached's figures fit its row");

/* sql's row goes on after the common figures. */
enum strata_sql_counter { STRATA_SQL_EXPIRY_PASSES = STRATA_TC_COUNT, STRATA_SQL_EXPIRED, STRATA_SQL_END };
_Static_assert(STRATA_SQL_END <= STRATA_TIER_WORDS, "sql's figures fit its row");

#define STRATA_STORE_AT (3 * STRATA_TIER_WORDS)
enum strata_store_counter {
    STRATA_SC_FILLS,
    STRATA_SC_FILL_US,
    STRATA_SC_LOCK_WAITS,
    STRATA_SC_LOCK_WAIT_US,
    STRATA_SC_LEASE_WAITS,
    STRATA_SC_LEASE_WAIT_US,
    STRATA_SC_STALE_HITS,
    STRATA_SC_INVALIDATIONS,
    STRATA_SC_VERSIONS_BUMPED,
    STRATA_SC_COUNT
};

#define STRATA_OPS_AT (STRATA_STORE_AT + 16)
enum strata_op_row { STRATA_OPS_READ_HIT, STRATA_OPS_FETCH_MISS, STRATA_OPS_WRITE, STRATA_OPS_DELETE, STRATA_OPS_ROWS };
enum strata_op_counter { STRATA_OC_COUNT, STRATA_OC_TIMED, STRATA_OC_US };

#define STRATA_TIER_COUNTER(row, c) ((row) * STRATA_TIER_WORDS + (c))
#define STRATA_OP_COUNTER(op, c) (STRATA_OPS_AT + (op) * STRATA_OP_WORDS + (c))

_Static_assert(STRATA_OPS_AT + STRATA_OPS_ROWS * STRATA_OP_WORDS <= STRATA_COUNTERS, "figures fit a slot");
_Static_assert(STRATA_COUNTER_SLOT_HEADER_WORDS * 8 + STRATA_COUNTERS * 8 == STRATA_COUNTER_SLOT_BYTES,
               "a slot is its header and its counters");

/* The name of counter word i ("l1.hits", "store.fills", "op.read_hit.us"), or NULL when the
 * word is unused. Static strings. */
const char *strata_counter_name(unsigned i);

/* What a reader sums. */
typedef struct strata_counter_totals {
    uint64_t counter[STRATA_COUNTERS];
    uint32_t processes; /* slots whose owner is alive now */
    uint32_t slots_used; /* slots ever claimed */
    uint64_t unslotted;
} strata_counter_totals;

/* Add n to word i of a slot's counters (words from strata_counter_claim, or a private array).
 * Only the slot's owner calls it: a relaxed load and store, no locked instruction. */
static inline void strata_counter_add(uint64_t *words, unsigned i, uint64_t n)
{
    __atomic_store_n(&words[i], __atomic_load_n(&words[i], __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/*
 * Claim a slot of the region at base for pid: the first slot never claimed, else the first
 * whose owner is dead. Returns the slot's counter words (and its index in *slot), or NULL when
 * every slot has a live owner (unslotted is then counted). A slot owned by pid itself (another
 * handle of this process) is not taken. O(STRATA_COUNTER_SLOTS) loads and at most one
 * kill(2) per slot with an owner. Never blocks.
 */
uint64_t *strata_counter_claim(uint8_t *base, pid_t pid, uint32_t *slot);

/* Give slot back (owner pid -> 0), keeping its counts. Only when pid still owns it. */
void strata_counter_release(uint8_t *base, uint32_t slot, pid_t pid);

/* Sum every slot of the region at base into *out. O(slots x counters) loads and one kill(2)
 * per owned slot. Lock-free; approximate while owners add. */
void strata_counter_sum(const uint8_t *base, strata_counter_totals *out);

/* The region header's polled_until (see REGION LAYOUT): one atomic load or store, any process,
 * no lock. The last store wins; a reader may see either side of a store in flight. */
uint64_t strata_polled_until(const uint8_t *base);
void strata_polled_until_set(uint8_t *base, uint64_t until_ms);

#endif /* STRATA_COUNTERS_H */
