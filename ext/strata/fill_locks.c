/*
 * fill_locks.c - the host's fill locks (fill_locks.h: layout, invariants, caveats).
 */
#include "fill_locks.h"

#define TAG_SHIFT 40
#define EXPIRES_MASK STRATA_FILL_LOCK_EXPIRES_MASK
#define TAG_MASK 0xFFFFFFULL
#define TAKE_ATTEMPTS 4

#define CHANGED STRATA_FILL_LOCK_CHANGED
_Static_assert(EXPIRES_MASK == (1ULL << (TAG_SHIFT - 1)) - 1 && CHANGED == 1ULL << (TAG_SHIFT - 1),
               "a word is tag (24 bits) | changed (1 bit) | expires (39 bits)");

static inline uint64_t *word_of(uint8_t *region, uint64_t hash)
{
    return (uint64_t *)region + ((hash >> 24) % STRATA_FILL_LOCK_SLOTS);
}

/* Whether the copy w of a word is a live lock at now (ms since created): neither free, nor
 * lapsed, nor damaged (an expiry further ahead than any taker writes). */
static inline int live(uint64_t w, uint64_t now)
{
    uint64_t expires = w & EXPIRES_MASK;
    return w != 0 && expires > now && expires - now <= STRATA_FILL_LOCK_MAX_TTL_MS;
}

strata_fill_lock_answer strata_fill_lock_take(uint8_t *region, uint64_t hash, uint64_t now, uint64_t ttl_ms,
                                              uint64_t *token)
{
    uint64_t *word = word_of(region, hash);
    uint64_t tag = hash & TAG_MASK, expires, mine;

    if (ttl_ms < 1) ttl_ms = 1;
    if (ttl_ms > STRATA_FILL_LOCK_MAX_TTL_MS) ttl_ms = STRATA_FILL_LOCK_MAX_TTL_MS;
    expires = now + ttl_ms;
    if (expires > EXPIRES_MASK) expires = EXPIRES_MASK; /* 34 years after the build */
    mine = (tag << TAG_SHIFT) | expires;
    /* Bound: TAKE_ATTEMPTS compare-and-swaps. */
    for (int attempt = 0; attempt < TAKE_ATTEMPTS; attempt++) {
        uint64_t w = __atomic_load_n(word, __ATOMIC_SEQ_CST);
        if (live(w, now)) return (w >> TAG_SHIFT) == tag ? STRATA_FILL_LOCK_HELD : STRATA_FILL_LOCK_OTHER;
        /* w is free, lapsed or damaged, and mine != w: mine's expiry is later than now. */
        if (__atomic_compare_exchange_n(word, &w, mine, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            *token = expires;
            return STRATA_FILL_LOCK_TAKEN;
        }
    }
    return STRATA_FILL_LOCK_HELD;
}

int strata_fill_lock_give(uint8_t *region, uint64_t hash, uint64_t token)
{
    uint64_t mine = ((hash & TAG_MASK) << TAG_SHIFT) | token, expected = mine;
    uint64_t *word = word_of(region, hash);
    if (token == 0 || token > EXPIRES_MASK) return 0;
    if (__atomic_compare_exchange_n(word, &expected, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return 1;
    expected = mine | CHANGED; /* a mark is only ever added to the holder's word, once */
    return __atomic_compare_exchange_n(word, &expected, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

void strata_fill_lock_mark(uint8_t *region, uint64_t hash)
{
    uint64_t *word = word_of(region, hash);
    uint64_t tag = hash & TAG_MASK;
    /* Bound: TAKE_ATTEMPTS compare-and-swaps. */
    for (int attempt = 0; attempt < TAKE_ATTEMPTS; attempt++) {
        uint64_t w = __atomic_load_n(word, __ATOMIC_SEQ_CST);
        if (w == 0 || (w >> TAG_SHIFT) != tag || (w & CHANGED)) return;
        if (__atomic_compare_exchange_n(word, &w, w | CHANGED, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return;
    }
}

int strata_fill_lock_marked(const uint8_t *region, uint64_t hash, uint64_t token)
{
    uint64_t w = __atomic_load_n(word_of((uint8_t *)region, hash), __ATOMIC_SEQ_CST);
    return token != 0 && token <= EXPIRES_MASK && w == (((hash & TAG_MASK) << TAG_SHIFT) | CHANGED | token);
}
