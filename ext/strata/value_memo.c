/* value_memo.c - see value_memo.h. */
#include "value_memo.h"
#include "hash.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Slots                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* The memo's keys are hashed with a fixed seed: crafted colliding keys only cost memo misses,
 * as each key has VALUE_MEMO_WAYS slots and no chain. */
#define MEMO_SEED 0x9E3779B97F4A7C15ULL

/* GC.stat's key for the count of major collections (a static Symbol, never collected). */
static VALUE sym_major_gc_count;

static uint64_t key_hash(const char *key, size_t key_len) { return strata_hash64(key, key_len, MEMO_SEED); }

/* Slots for limit: twice the most entries limit allows, a power of two in [16, MAX_SLOTS]. */
static size_t slot_count(size_t limit)
{
    size_t want = 2 * (limit / VALUE_MEMO_MIN + 1), n = 16;
    /* Bound: at most log2(MAX_SLOTS) doublings. */
    while (n < want && n < VALUE_MEMO_MAX_SLOTS) n <<= 1;
    return n;
}

/* Empty slot s. An old entry's bytes stay charged until a major collection. Allocates nothing
 * (runs in GC). */
static void drop(value_memo *m, value_memo_slot *s)
{
    size_t len = (size_t)RSTRING_LEN(s->value);

    m->bytes -= len;
    if (s->old)
        m->old_dropped += len;
    else
        m->young--;
    m->entries--;
    free(s->key);
    memset(s, 0, sizeof *s);
}

/* key's slot, or NULL. */
static value_memo_slot *lookup(const value_memo *m, uint64_t h, const char *key, size_t key_len)
{
    /* Bound: VALUE_MEMO_WAYS slots. */
    for (size_t i = 0; i < VALUE_MEMO_WAYS; i++) {
        value_memo_slot *s = &m->slots[(h + i) & m->mask];
        if (s->value && s->hash == h && s->key_len == key_len && memcmp(s->key, key, key_len) == 0) return s;
    }
    return NULL;
}

/* Evict young entries, clock order, until len more bytes fit. Returns whether they fit. */
static int make_room(value_memo *m, size_t len)
{
    /* Bound: each pass drops one young entry; the hand finds one within a turn of the slots. */
    while (m->bytes + m->old_dropped + len > m->limit && m->young > 0) {
        value_memo_slot *s = &m->slots[m->hand];
        m->hand = (m->hand + 1) & m->mask;
        if (s->value && !s->old) drop(m, s);
    }
    return m->bytes + m->old_dropped + len <= m->limit;
}

/* ------------------------------------------------------------------------------------------ */
/* Operations                                                                                 */
/* ------------------------------------------------------------------------------------------ */

void value_memo_init(void)
{
    sym_major_gc_count = ID2SYM(rb_intern("major_gc_count"));
    rb_gc_stat(sym_major_gc_count); /* its first call sets up GC.stat's keys, which may allocate */
}

void value_memo_mark(value_memo *m)
{
    size_t now = rb_gc_count();
    /* An incremental major collection may mark twice; old entries age once per collection. */
    int first = now != m->marked_at;

    m->marked_at = now;
    if (!m->slots || m->entries == 0) return;
    /* Bound: one pass over the slots (at most VALUE_MEMO_MAX_SLOTS). */
    for (size_t i = 0; i <= m->mask; i++) {
        value_memo_slot *s = &m->slots[i];
        if (!s->value) continue;
        if (!s->old && now - s->born >= VALUE_MEMO_GENERATIONS) {
            if (!s->hit) {
                drop(m, s); /* young and not marked: this collection frees it */
                continue;
            }
            s->old = 1;
            s->hit = 0;
            m->young--;
        } else if (s->old && first) {
            if (!s->hit) {
                drop(m, s);
                continue;
            }
            s->hit = 0;
        }
        rb_gc_mark(s->value);
    }
}

VALUE value_memo_find(value_memo *m, const char *key, size_t key_len, size_t len, uint64_t version)
{
    value_memo_slot *s;

    if (!m->slots) return Qnil;
    s = lookup(m, key_hash(key, key_len), key, key_len);
    if (!s || (size_t)RSTRING_LEN(s->value) != len || s->version != version) return Qnil;
    s->hit = 1;
    return s->value;
}

void value_memo_store(value_memo *m, const char *key, size_t key_len, VALUE value, uint64_t version)
{
    size_t len = (size_t)RSTRING_LEN(value);
    size_t majors = rb_gc_stat(sym_major_gc_count);
    uint64_t h = key_hash(key, key_len);
    value_memo_slot *s, *victim = NULL;
    char *copy;

    /* Freezing may allocate on newer Rubies (a frozen shape), so it comes before any slot is
     * looked at: from here on nothing can start a collection. */
    rb_obj_freeze(value);
    if (!value_memo_wants(m, len)) return;
    if (majors != m->majors) { /* what old entries left behind has been freed */
        m->majors = majors;
        m->old_dropped = 0;
    }
    if (!m->slots) {
        size_t n = slot_count(m->limit);
        m->slots = calloc(n, sizeof *m->slots);
        if (!m->slots) return;
        m->mask = n - 1;
        m->hand = 0;
    }

    s = lookup(m, h, key, key_len);
    if (s) drop(m, s); /* an older version */
    if (!make_room(m, len)) return;
    /* An empty slot of key's window, else its oldest young entry. */
    for (size_t i = 0; i < VALUE_MEMO_WAYS; i++) {
        s = &m->slots[(h + i) & m->mask];
        if (!s->value) {
            victim = s;
            break;
        }
        if (!s->old && (!victim || s->seq < victim->seq)) victim = s;
    }
    if (!victim) return;
    copy = malloc(key_len ? key_len : 1);
    if (!copy) return;
    memcpy(copy, key, key_len);
    if (victim->value) drop(m, victim);

    victim->value = value;
    victim->version = version;
    victim->hash = h;
    victim->seq = ++m->seq;
    victim->born = rb_gc_count();
    victim->hit = 0;
    victim->old = 0;
    victim->key = copy;
    victim->key_len = key_len;
    m->entries++;
    m->young++;
    m->bytes += len;
}

void value_memo_clear(value_memo *m)
{
    if (m->slots) {
        /* Bound: one pass over the slots. */
        for (size_t i = 0; i <= m->mask; i++)
            if (m->slots[i].value) drop(m, &m->slots[i]);
    }
}

void value_memo_set_limit(value_memo *m, size_t limit)
{
    size_t old_dropped, majors;

    value_memo_clear(m);
    old_dropped = m->old_dropped; /* still to be freed, whatever the new limit */
    majors = m->majors;
    value_memo_free(m);
    m->old_dropped = old_dropped;
    m->majors = majors;
    m->limit = limit;
}

void value_memo_free(value_memo *m)
{
    /* The Strings are not looked at: from the owner's dfree they may be freed already. */
    if (m->slots) {
        /* Bound: one pass over the slots. */
        for (size_t i = 0; i <= m->mask; i++) free(m->slots[i].key);
        free(m->slots);
    }
    memset(m, 0, sizeof *m);
}

size_t value_memo_memsize(const value_memo *m)
{
    size_t n = 0;

    if (!m->slots) return 0;
    /* Bound: one pass over the slots. */
    for (size_t i = 0; i <= m->mask; i++) n += m->slots[i].key_len;
    return n + (m->mask + 1) * sizeof *m->slots;
}
