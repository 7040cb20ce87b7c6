/*
 * counters.c - the host's counters region of the L1 file. The contract (layout, invariants,
 * caveats) is in counters.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "counters.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>

/* ------------------------------------------------------------------------------------------ */
/* Layout                                                                                     */
/* ------------------------------------------------------------------------------------------ */

struct region_header {
    uint64_t unslotted;
    uint64_t polled_until;
};

struct slot {
    uint64_t owner;
    uint64_t claims;
    uint64_t unused[STRATA_COUNTER_SLOT_HEADER_WORDS - 2];
    uint64_t counter[STRATA_COUNTERS];
};

_Static_assert(sizeof(struct slot) == STRATA_COUNTER_SLOT_BYTES, "a slot is 1024 bytes");
_Static_assert(sizeof(struct region_header) <= STRATA_COUNTER_HEADER_BYTES, "region header fits its page");

static inline struct slot *slot_at(uint8_t *base, uint32_t i)
{
    return (struct slot *)(base + STRATA_COUNTER_HEADER_BYTES + (size_t)i * STRATA_COUNTER_SLOT_BYTES);
}

static inline const struct slot *slot_at_const(const uint8_t *base, uint32_t i)
{
    return (const struct slot *)(base + STRATA_COUNTER_HEADER_BYTES + (size_t)i * STRATA_COUNTER_SLOT_BYTES);
}

/* ------------------------------------------------------------------------------------------ */
/* Names                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static const char *const store_names[STRATA_SC_COUNT] = {
    [STRATA_SC_FILLS] = "store.fills",
    [STRATA_SC_FILL_US] = "store.fill_us",
    [STRATA_SC_LOCK_WAITS] = "store.lock_waits",
    [STRATA_SC_LOCK_WAIT_US] = "store.lock_wait_us",
    [STRATA_SC_LEASE_WAITS] = "store.lease_waits",
    [STRATA_SC_LEASE_WAIT_US] = "store.lease_wait_us",
    [STRATA_SC_STALE_HITS] = "store.stale_hits",
    [STRATA_SC_INVALIDATIONS] = "store.invalidations",
    [STRATA_SC_VERSIONS_BUMPED] = "store.versions_bumped",
};

/* "<row>.<counter>" for the tier rows, built once into static storage by the compiler. */
#define TIER_NAMES(row)                                                                            \
    {row ".hits", row ".misses", row ".writes", row ".writes_refused", row ".deletes",             \
     row ".evictions", row ".errors_timeout", row ".errors_connection", row ".errors_other"}
static const char *const tier_row_names[3][STRATA_TC_COUNT] = {TIER_NAMES("l1"), TIER_NAMES("memcached"),
                                                                TIER_NAMES("sql")};

static const char *const memcached_names[STRATA_MC_END - STRATA_TC_COUNT] = {
    [STRATA_MC_GUTTER_READS - STRATA_TC_COUNT] = "memcached.gutter_reads",
    [STRATA_MC_GUTTER_WRITES - STRATA_TC_COUNT] = "memcached.gutter_writes",
    [STRATA_MC_GUTTER_DELETES - STRATA_TC_COUNT] = "memcached.gutter_deletes",
    [STRATA_MC_RECOVERY_DELETES - STRATA_TC_COUNT] = "memcached.recovery_deletes",
    [STRATA_MC_RECOVERY_FLUSHES - STRATA_TC_COUNT] = "memcached.recovery_flushes",
};

static const char *const sql_names[STRATA_SQL_END - STRATA_TC_COUNT] = {
    [STRATA_SQL_EXPIRY_PASSES - STRATA_TC_COUNT] = "sql.expiry_passes",
    [STRATA_SQL_EXPIRED - STRATA_TC_COUNT] = "sql.expired",
};

#define OP_NAMES(op) {"op." op ".count", "op." op ".timed", "op." op ".us"}
static const char *const op_names[STRATA_OPS_ROWS][3] = {OP_NAMES("read_hit"), OP_NAMES("fetch_miss"),
                                                         OP_NAMES("write"), OP_NAMES("delete")};

const char *strata_counter_name(unsigned i)
{
    if (i < STRATA_STORE_AT) {
        unsigned row = i / STRATA_TIER_WORDS, c = i % STRATA_TIER_WORDS;
        if (c < STRATA_TC_COUNT) return tier_row_names[row][c];
        if (row == STRATA_ROW_MEMCACHED) return c < STRATA_MC_END ? memcached_names[c - STRATA_TC_COUNT] : NULL;
        if (row == STRATA_ROW_SQL) return c < STRATA_SQL_END ? sql_names[c - STRATA_TC_COUNT] : NULL;
        return NULL;
    }
    if (i < STRATA_OPS_AT) return i - STRATA_STORE_AT < STRATA_SC_COUNT ? store_names[i - STRATA_STORE_AT] : NULL;
    if (i < STRATA_OPS_AT + STRATA_OPS_ROWS * STRATA_OP_WORDS) {
        unsigned op = (i - STRATA_OPS_AT) / STRATA_OP_WORDS, c = (i - STRATA_OPS_AT) % STRATA_OP_WORDS;
        return c < 3 ? op_names[op][c] : NULL;
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Owners                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Whether an owner word (a copy, read once) names a live process. Anything that is not a
 * plausible pid reads as dead, and is never passed to kill(2): kill(-1, 0) probes every process
 * and kill(0, 0) our process group. EPERM means the process exists (another uid). */
static int owner_alive(uint64_t owner)
{
    if (owner == 0 || owner > (uint64_t)INT32_MAX) return 0;
    return kill((pid_t)owner, 0) == 0 || errno != ESRCH;
}

/* Take slot s if its owner word still holds seen. */
static int slot_take(struct slot *s, uint64_t seen, pid_t pid)
{
    if (!__atomic_compare_exchange_n(&s->owner, &seen, (uint64_t)pid, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return 0;
    __atomic_fetch_add(&s->claims, 1, __ATOMIC_RELAXED);
    return 1;
}

uint64_t *strata_counter_claim(uint8_t *base, pid_t pid, uint32_t *slot)
{
    /* Two passes, bound 2 x STRATA_COUNTER_SLOTS: slots never claimed first, so that counts
     * of dead processes stay where they are when there is room; then dead owners' slots. */
    for (uint32_t i = 0; i < STRATA_COUNTER_SLOTS; i++) {
        struct slot *s = slot_at(base, i);
        if (__atomic_load_n(&s->owner, __ATOMIC_ACQUIRE) == 0 && slot_take(s, 0, pid)) {
            *slot = i;
            return s->counter;
        }
    }
    for (uint32_t i = 0; i < STRATA_COUNTER_SLOTS; i++) {
        struct slot *s = slot_at(base, i);
        uint64_t owner = __atomic_load_n(&s->owner, __ATOMIC_ACQUIRE);
        if (owner != (uint64_t)pid && !owner_alive(owner) && slot_take(s, owner, pid)) {
            *slot = i;
            return s->counter;
        }
    }
    __atomic_fetch_add(&((struct region_header *)base)->unslotted, 1, __ATOMIC_RELAXED);
    return NULL;
}

void strata_counter_release(uint8_t *base, uint32_t slot, pid_t pid)
{
    uint64_t mine = (uint64_t)pid;
    if (slot >= STRATA_COUNTER_SLOTS) return;
    __atomic_compare_exchange_n(&slot_at(base, slot)->owner, &mine, 0, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

uint64_t strata_polled_until(const uint8_t *base)
{
    return __atomic_load_n(&((const struct region_header *)base)->polled_until, __ATOMIC_ACQUIRE);
}

void strata_polled_until_set(uint8_t *base, uint64_t until_ms)
{
    __atomic_store_n(&((struct region_header *)base)->polled_until, until_ms, __ATOMIC_RELEASE);
}

void strata_counter_sum(const uint8_t *base, strata_counter_totals *out)
{
    for (unsigned w = 0; w < STRATA_COUNTERS; w++) out->counter[w] = 0;
    out->processes = 0;
    out->slots_used = 0;
    out->unslotted = __atomic_load_n(&((const struct region_header *)base)->unslotted, __ATOMIC_RELAXED);
    /* Bound: STRATA_COUNTER_SLOTS x STRATA_COUNTERS loads, one kill(2) per owned slot. */
    for (uint32_t i = 0; i < STRATA_COUNTER_SLOTS; i++) {
        const struct slot *s = slot_at_const(base, i);
        uint64_t owner = __atomic_load_n(&s->owner, __ATOMIC_ACQUIRE);
        if (owner_alive(owner)) out->processes++;
        if (__atomic_load_n(&s->claims, __ATOMIC_RELAXED) != 0) out->slots_used++;
        for (unsigned w = 0; w < STRATA_COUNTERS; w++) out->counter[w] += __atomic_load_n(&s->counter[w], __ATOMIC_RELAXED);
    }
}
