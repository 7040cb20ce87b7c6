/*
 * value_memo.h - a per-process memo of large values read from the table, so that a repeated
 * hit on an unchanged large value costs a lookup instead of a malloc and a copy.
 *
 * WHY: every hit used to copy the value into a new Ruby String. For a 25 KB value that is a
 * 25 KB malloc per read; glibc hands freed pages back after GC and faults them in again, which
 * cost more than the read itself (issue 2: strata_store hit_25kb against MemoryStore, whose
 * hits share their String's buffer).
 *
 * HOW: the memo maps key bytes -> (frozen String, item version) (strata_sink's version:
 * checksum and cas of the published item). strata_get offers every value of at least
 * VALUE_MEMO_MIN bytes to the sink with its version before copying; when the memo holds that
 * key at that version and length, the read copies nothing and the caller gets a new String
 * sharing the memo's buffer (copy-on-write, so callers may still mutate what they get). The
 * table stays the truth: a memo entry is used only when the table's current item under the key
 * has the same version, so a delete, overwrite, expiry or eviction by any process is seen on
 * the next read.
 *
 * BOUNDS: limit bytes (the option memo_size) cover the values the memo holds plus those it
 * dropped that only Ruby's next major collection frees. That second part is what makes limit a
 * bound on memory (issue 21). A String that survives three collections is promoted to Ruby's
 * old generation, and an old String dropped from the memo stays allocated until the next major
 * collection, which may be 100 MB of allocation away; a memo that churned (more large values
 * read than it holds) pinned dozens of times its limit in dead buffers, and glibc kept the
 * pages after they were freed. So the mark function (value_memo_mark, run by every collection)
 * ages the entries:
 *   - an entry stored VALUE_MEMO_GENERATIONS collections ago that was never hit is dropped
 *     there, young: the collection frees it (unless a caller still shares it);
 *   - one that was hit is kept and counted as old from then on;
 *   - an old entry not hit since the previous collection is dropped, and its bytes stay
 *     charged (old_dropped) until a major collection has run.
 * A store evicts young entries (clock hand) to make room, never old ones (that frees nothing
 * until a major collection), and stores nothing when there is no room. Young entries dropped
 * or evicted are ordinary garbage for the next minor collection, as every copy is with the
 * memo off.
 *
 * LAYOUT: a table of 2^k slots, at least twice as many as limit / VALUE_MEMO_MIN (the most
 * entries the byte bound allows), at most VALUE_MEMO_MAX_SLOTS. A key lives in one of the
 * VALUE_MEMO_WAYS slots from its hash; storing into a full window replaces the oldest young
 * entry there (or stores nothing when all are old). Keys are plain-malloc'd copies, so
 * no Ruby code (a String subclass's hash or eql?) ever runs in the memo.
 *
 * THREADS AND GC: every function runs with the GVL held. value_memo_mark changes the memo
 * (it drops entries) while a collection runs, and a collection can start at any Ruby
 * allocation; so no function here allocates Ruby objects, or calls xmalloc, once it has
 * looked at a slot. A forked child inherits the memo, which stays valid for the same reason as
 * in the parent.
 */
#ifndef STRATA_VALUE_MEMO_H
#define STRATA_VALUE_MEMO_H

/* Ruby's headers are not -Wextra clean; relax warnings for them only. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <ruby.h>
#pragma GCC diagnostic pop

#include <stddef.h>
#include <stdint.h>

/* Smaller values are cheaper to copy than to look up. */
#define VALUE_MEMO_MIN 4096

/* Slots a key may live in (probed from its hash). */
#define VALUE_MEMO_WAYS 4

/* Slot table size cap (64 bytes a slot): a memo_size over 128 MiB gets no more slots. */
#define VALUE_MEMO_MAX_SLOTS (1u << 16)

/* The collection that finds an entry stored this many collections ago drops it (never hit) or
 * counts it as old (hit). The memo has then marked it once: it is age 1 of the 3 that make an
 * object old, so a young entry is never an old one. */
#define VALUE_MEMO_GENERATIONS 2

typedef struct value_memo_slot {
    VALUE value;      /* frozen String; 0 for an empty slot */
    uint64_t version; /* of the item value was read from */
    uint64_t hash;    /* of the key bytes */
    uint64_t seq;     /* store order: the oldest young entry of a full window is replaced */
    size_t born;      /* rb_gc_count() when stored */
    int hit;          /* found since stored (young) or since the last collection (old) */
    int old;          /* kept past VALUE_MEMO_GENERATIONS: dropping it frees nothing until a
                         major collection */
    char *key;        /* malloc'd copy of the key bytes */
    size_t key_len;
} value_memo_slot;

typedef struct value_memo {
    value_memo_slot *slots; /* NULL until the first store */
    size_t mask;            /* slot count - 1 */
    size_t hand;            /* next slot the byte bound looks at */
    uint64_t seq;           /* last store's seq */
    size_t entries;         /* slots in use */
    size_t young;           /* of which not old */
    size_t bytes;           /* value bytes held */
    size_t old_dropped;     /* value bytes of old entries dropped since the last major collection */
    size_t majors;          /* major collections counted when old_dropped was last reset */
    size_t marked_at;       /* rb_gc_count() of the last mark: old entries age once a collection */
    size_t limit;           /* bytes + old_dropped allowed; 0 = off */
} value_memo;

/* Once, before any other call (sets up what value_memo_store asks the GC). */
void value_memo_init(void);

/* GC: mark the entries kept and drop the others (BOUNDS above). Called by the owner's dmark,
 * during a collection; allocates nothing. */
void value_memo_mark(value_memo *m);

/* Whether a value of len bytes is worth offering to the memo. */
static inline int value_memo_wants(const value_memo *m, size_t len)
{
    return m->limit && len >= VALUE_MEMO_MIN && len <= m->limit;
}

/* The memo's frozen String for key when it was read at version and is len bytes, else Qnil.
 * Marks the entry hit. */
VALUE value_memo_find(value_memo *m, const char *key, size_t key_len, size_t len, uint64_t version);

/* Remember value (frozen here) as key's value at version, evicting young entries to stay
 * within limit. Does nothing when only old entries could make room, or if memory for the slots
 * or the key copy runs out. */
void value_memo_store(value_memo *m, const char *key, size_t key_len, VALUE value, uint64_t version);

/* Forget every entry; limit and slots stay. */
void value_memo_clear(value_memo *m);

/* Forget every entry and set a new limit (the slots are sized again on the next store). */
void value_memo_set_limit(value_memo *m, size_t limit);

/* Give back all memory; the memo is then empty and off. Reads none of the Strings, so the
 * owner's dfree may call it while the collection frees them too. */
void value_memo_free(value_memo *m);

/* Bytes of C memory the memo holds (slots and key copies, not the Strings). */
size_t value_memo_memsize(const value_memo *m);

#endif
