/*
 * value_memo.h - a per-process memo of large values read from the table, so that a repeated
 * hit on an unchanged large value costs a lookup instead of a malloc and a copy.
 *
 * WHY: every hit used to copy the value into a new Ruby String. For a 25 KB value that is a
 * 25 KB malloc per read; glibc hands freed pages back after GC and faults them in again, which
 * cost more than the read itself (issue 2: strata_store hit_25kb against MemoryStore, whose
 * hits share their String's buffer).
 *
 * HOW: the memo maps key -> [frozen String, item version] (strata_sink's version: checksum and
 * cas of the published item). strata_get offers every value of at least VALUE_MEMO_MIN bytes
 * to the sink with its version before copying; when the memo holds that key at that version
 * and length, the read copies nothing and the caller gets a new String sharing the memo's
 * buffer (copy-on-write, so callers may still mutate what they get). The table stays the
 * truth: a memo entry is used only when the table's current item under the key has the same
 * version, so a delete, overwrite, expiry or eviction by any process is seen on the next read.
 *
 * BOUNDS: at most limit bytes of values (the option memo_size); the oldest entries go first
 * (a Ruby Hash keeps insertion order). Entries for keys that were since deleted stay until
 * pushed out. limit 0 turns the memo off.
 *
 * THREADS: every function runs with the GVL held; the Hash is only touched then. A forked
 * child inherits the memo, which stays valid for the same reason as in the parent.
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

typedef struct value_memo {
    VALUE entries; /* key -> [frozen String, version as Integer]; 0 until first use */
    size_t bytes;  /* value bytes held */
    size_t limit;  /* value bytes allowed; 0 = off */
} value_memo;

/* GC: mark what the memo holds. */
void value_memo_mark(const value_memo *m);

/* Whether a value of len bytes under key is worth offering to the memo. */
int value_memo_wants(const value_memo *m, VALUE key, size_t len);

/* The memo's frozen String for key when it was read at version and is len bytes, else Qnil. */
VALUE value_memo_find(const value_memo *m, VALUE key, size_t len, uint64_t version);

/* Remember value (frozen here) as key's value at version, pushing out the oldest entries to
 * stay within limit. */
void value_memo_store(value_memo *m, VALUE key, VALUE value, uint64_t version);

/* Forget everything; limit stays. */
void value_memo_clear(value_memo *m);

#endif
