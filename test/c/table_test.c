/*
 * table_test.c - tests of the shared-memory table in C, without Ruby: table.c and lock.c are
 * linked directly. Run through the Makefile (test, asan, valgrind, check).
 * STRATA_TEST_QUICK=1 shortens the multi-process tests (used under valgrind).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../ext/strata/hash.h"
#include "../../ext/strata/table.h"
#include "harness.h"

static int quick;

static strata_options opts_of(uint64_t size)
{
    strata_options o;
    memset(&o, 0, sizeof o);
    o.size = size;
    o.lock_timeout_ns = 50 * 1000 * 1000;
    return o;
}

static strata_table *open_table(const char *name, strata_options o)
{
    strata_table *t = NULL;
    const char *reason = NULL;
    int err = 0;
    strata_status st = strata_open(scratch_path(name), &o, &t, &reason, &err);
    if (st != STRATA_OK) fprintf(stderr, "  open %s: %s (%s)\n", name, strata_strerror(st), strerror(err));
    if (reason) fprintf(stderr, "  open %s in %d: rebuilt: %s\n", name, (int)getpid(), reason);
    return t;
}

/* Values read back through a sink into a caller buffer. */
typedef struct buf {
    char data[70000];
    size_t len;
} buf;

static void *buf_reserve(void *ctx, size_t len, uint64_t version)
{
    buf *b = ctx;
    (void)version;
    if (len > sizeof b->data) return NULL;
    b->len = len;
    return b->data;
}

static strata_status get(strata_table *t, const char *key, buf *b, uint64_t *cas)
{
    strata_sink sink = {buf_reserve, b};
    return strata_get(t, key, strlen(key), &sink, cas);
}

static int get_is(strata_table *t, const char *key, const char *want)
{
    static buf b;
    if (get(t, key, &b, NULL) != STRATA_OK) return want == NULL;
    return want && b.len == strlen(want) && memcmp(b.data, want, b.len) == 0;
}

static strata_status put_flagged(strata_table *t, strata_op op, const char *key, const void *v, size_t vlen,
                                 uint64_t ttl_ms, uint64_t cas, unsigned flags)
{
    strata_write_req r;
    memset(&r, 0, sizeof r);
    r.op = op;
    r.key = key;
    r.key_len = strlen(key);
    r.value = v;
    r.value_len = vlen;
    r.ttl_ms = ttl_ms;
    r.cas = cas;
    r.flags = flags;
    return strata_write(t, &r, 1);
}

static strata_status put(strata_table *t, strata_op op, const char *key, const void *v, size_t vlen,
                         uint64_t ttl_ms, uint64_t cas)
{
    return put_flagged(t, op, key, v, vlen, ttl_ms, cas, 0);
}

static strata_status set(strata_table *t, const char *key, const char *v)
{
    return put(t, STRATA_OP_SET, key, v, strlen(v), 0, 0);
}

static strata_status counter(strata_table *t, strata_op op, const char *key, uint64_t amount, int has_initial,
                             uint64_t initial, uint64_t *result)
{
    strata_write_req r;
    strata_status st;
    memset(&r, 0, sizeof r);
    r.op = op;
    r.key = key;
    r.key_len = strlen(key);
    r.amount = amount;
    r.has_initial = has_initial;
    r.initial = initial;
    st = strata_write(t, &r, 1);
    *result = r.result;
    return st;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static size_t make_value(const char *key, uint64_t n, char *out, size_t len);
static int value_ok(const char *key, const char *v, size_t len);
static void corrupt_at(const char *name, off_t off, const void *bytes, size_t len);

/* ------------------------------------------------------------------------------------------ */
/* Single-process behaviour                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void test_set_get_delete(void)
{
    strata_table *t = open_table("basic.l1", opts_of(4u << 20));
    uint64_t cas1 = 0, cas2 = 0;
    buf b;
    REQUIRE(t);
    CHECK(get(t, "missing", &b, NULL) == STRATA_NOT_FOUND);
    CHECK(set(t, "a", "one") == STRATA_OK);
    CHECK(get_is(t, "a", "one"));
    CHECK(get(t, "a", &b, &cas1) == STRATA_OK);
    CHECK(set(t, "a", "two, longer") == STRATA_OK);
    CHECK(get_is(t, "a", "two, longer"));
    CHECK(get(t, "a", &b, &cas2) == STRATA_OK);
    CHECK(cas1 != cas2);
    CHECK(set(t, "empty", "") == STRATA_OK);
    CHECK(get(t, "empty", &b, NULL) == STRATA_OK && b.len == 0);
    CHECK(put(t, STRATA_OP_DELETE, "a", NULL, 0, 0, 0) == STRATA_OK);
    CHECK(put(t, STRATA_OP_DELETE, "a", NULL, 0, 0, 0) == STRATA_NOT_FOUND);
    CHECK(get_is(t, "a", NULL));
    {
        char key[STRATA_MAX_KEY + 2];
        memset(key, 'k', sizeof key);
        key[STRATA_MAX_KEY] = 0;
        CHECK(set(t, key, "max key") == STRATA_OK);
        CHECK(get_is(t, key, "max key"));
        key[STRATA_MAX_KEY] = 'k';
        key[STRATA_MAX_KEY + 1] = 0;
        CHECK(set(t, key, "too long") == STRATA_EINVAL);
    }
    /* binary key and value with NULs */
    {
        const char bkey[] = {'b', 0, 'k'};
        const char bval[] = {0, 1, 2, 0, (char)255};
        strata_write_req r = {.op = STRATA_OP_SET, .key = bkey, .key_len = 3, .value = bval, .value_len = 5};
        strata_sink sink = {buf_reserve, &b};
        CHECK(strata_write(t, &r, 1) == STRATA_OK);
        CHECK(strata_get(t, bkey, 3, &sink, NULL) == STRATA_OK && b.len == 5 && memcmp(b.data, bval, 5) == 0);
        CHECK(strata_get(t, bkey, 2, &sink, NULL) == STRATA_NOT_FOUND);
    }
    strata_close(t);
}

static void test_expiry(void)
{
    strata_table *t = open_table("expiry.l1", opts_of(4u << 20));
    uint64_t start, removed = 0;
    REQUIRE(t);
    CHECK(put(t, STRATA_OP_SET, "short", "v", 1, 30, 0) == STRATA_OK);
    CHECK(put(t, STRATA_OP_SET, "long", "v", 1, 60000, 0) == STRATA_OK);
    CHECK(put(t, STRATA_OP_SET, "forever", "v", 1, 0, 0) == STRATA_OK);
    CHECK(get_is(t, "short", "v"));
    start = mono_ms();
    /* Bound: 2 s of 5 ms polls. */
    while (get_is(t, "short", "v") && mono_ms() - start < 2000) sleep_ms(5);
    CHECK(get_is(t, "short", NULL));
    CHECK(get_is(t, "long", "v"));
    CHECK(get_is(t, "forever", "v"));
    /* add over an expired entry stores */
    CHECK(put(t, STRATA_OP_SET, "gone", "old", 3, 1, 0) == STRATA_OK);
    sleep_ms(5);
    CHECK(put(t, STRATA_OP_ADD, "gone", "new", 3, 0, 0) == STRATA_OK);
    CHECK(get_is(t, "gone", "new"));
    CHECK(put(t, STRATA_OP_SET, "stale", "x", 1, 1, 0) == STRATA_OK);
    sleep_ms(5);
    CHECK(strata_cleanup(t, &removed) == STRATA_OK);
    CHECK(removed == 2); /* "short" and "stale" */
    strata_close(t);
}

static strata_status put_polled(strata_table *t, strata_op op, const char *key, const char *v)
{
    return put_flagged(t, op, key, v, strlen(v), 600000, 0, STRATA_ITEM_POLLED);
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* POLLED items (table.h): live only while polled_until is ahead of the clock; the rest never
 * look at it. A second handle on the file sees the same vouch. */
static void test_polled_items(void)
{
    strata_table *t = open_table("polled.l1", opts_of(4u << 20)), *u;
    uint64_t removed = 0;
    REQUIRE(t);
    u = open_table("polled.l1", opts_of(4u << 20));
    REQUIRE(u);
    CHECK(strata_polled_until_get(t) == 0); /* a new file vouches for nothing */
    CHECK(put_polled(t, STRATA_OP_SET, "copy", "v1") == STRATA_OK);
    CHECK(put(t, STRATA_OP_SET, "plain", "p", 1, 0, 0) == STRATA_OK);
    CHECK(get_is(t, "copy", NULL));
    CHECK(get_is(t, "plain", "p"));

    strata_polled_until_put(u, wall_ms() + 60000);
    CHECK(strata_polled_until_get(t) == strata_polled_until_get(u));
    CHECK(get_is(t, "copy", "v1"));
    CHECK(get_is(u, "copy", "v1"));
    CHECK(put_polled(t, STRATA_OP_ADD, "copy", "v2") == STRATA_NOT_STORED); /* live: add loses */

    strata_polled_until_put(u, wall_ms() - 1); /* the vouch lapsed */
    CHECK(get_is(t, "copy", NULL));
    CHECK(get_is(u, "copy", NULL));
    CHECK(get_is(t, "plain", "p"));
    CHECK(put_polled(t, STRATA_OP_ADD, "copy", "v3") == STRATA_OK); /* dead: add replaces */
    CHECK(get_is(t, "copy", NULL));

    strata_polled_until_put(t, wall_ms() + 60000);
    CHECK(get_is(u, "copy", "v3"));
    strata_polled_until_put(t, 1);
    CHECK(strata_cleanup(t, &removed) == STRATA_OK);
    CHECK(removed == 1); /* the dead copy, not "plain" */
    strata_polled_until_put(t, wall_ms() + 60000);
    CHECK(get_is(t, "copy", NULL));
    CHECK(get_is(t, "plain", "p"));
    strata_close(u);
    strata_close(t);
}

static void test_add_cas(void)
{
    strata_table *t = open_table("cas.l1", opts_of(4u << 20));
    uint64_t cas = 0, cas2 = 0;
    buf b;
    REQUIRE(t);
    CHECK(put(t, STRATA_OP_ADD, "k", "1", 1, 0, 0) == STRATA_OK);
    CHECK(put(t, STRATA_OP_ADD, "k", "2", 1, 0, 0) == STRATA_NOT_STORED);
    CHECK(get_is(t, "k", "1"));
    CHECK(get(t, "k", &b, &cas) == STRATA_OK);
    CHECK(put(t, STRATA_OP_CAS, "k", "3", 1, 0, cas) == STRATA_OK);
    CHECK(put(t, STRATA_OP_CAS, "k", "4", 1, 0, cas) == STRATA_NOT_STORED);
    CHECK(get_is(t, "k", "3"));
    CHECK(get(t, "k", &b, &cas2) == STRATA_OK);
    CHECK(put(t, STRATA_OP_CAS, "absent", "x", 1, 0, cas2) == STRATA_NOT_STORED);
    CHECK(put(t, STRATA_OP_CAS, "k", "5", 1, 0, cas2 + (1ULL << 32)) == STRATA_NOT_STORED);
    CHECK(put(t, STRATA_OP_CAS, "k", "5", 1, 0, cas2) == STRATA_OK);
    CHECK(get_is(t, "k", "5"));
    strata_close(t);
}

/* A sink that remembers the version it last copied and answers HAVE when offered it again. */
typedef struct memo_sink {
    buf b;
    uint64_t version;
    int have_answers;
} memo_sink;

static void *memo_reserve(void *ctx, size_t len, uint64_t version)
{
    memo_sink *m = ctx;
    if (m->version == version && m->b.len == len) {
        m->have_answers++;
        return STRATA_SINK_HAVE;
    }
    m->version = version;
    return buf_reserve(&m->b, len, version);
}

static void test_sink_have(void)
{
    strata_table *t = open_table("have.l1", opts_of(4u << 20));
    static memo_sink m;
    strata_sink sink = {memo_reserve, &m};
    uint64_t first;
    REQUIRE(t);
    CHECK(put(t, STRATA_OP_SET, "k", "one", 3, 0, 0) == STRATA_OK);
    CHECK(strata_get(t, "k", 1, &sink, NULL) == STRATA_OK && m.have_answers == 0);
    CHECK(m.b.len == 3 && memcmp(m.b.data, "one", 3) == 0);
    first = m.version;
    /* unchanged: found, nothing copied */
    memset(m.b.data, 0, 3);
    CHECK(strata_get(t, "k", 1, &sink, NULL) == STRATA_OK && m.have_answers == 1);
    CHECK(m.b.data[0] == 0);
    /* same bytes written again: a new item, so a new version, copied again */
    CHECK(put(t, STRATA_OP_SET, "k", "one", 3, 0, 0) == STRATA_OK);
    CHECK(strata_get(t, "k", 1, &sink, NULL) == STRATA_OK && m.have_answers == 1);
    CHECK(m.version != first && memcmp(m.b.data, "one", 3) == 0);
    /* another value of the same length */
    CHECK(put(t, STRATA_OP_SET, "k", "two", 3, 0, 0) == STRATA_OK);
    CHECK(strata_get(t, "k", 1, &sink, NULL) == STRATA_OK && m.have_answers == 1);
    CHECK(memcmp(m.b.data, "two", 3) == 0);
    /* deleted: a miss, whatever the sink holds */
    CHECK(put(t, STRATA_OP_DELETE, "k", NULL, 0, 0, 0) == STRATA_OK);
    CHECK(strata_get(t, "k", 1, &sink, NULL) == STRATA_NOT_FOUND);
    strata_close(t);
}

static void test_counters(void)
{
    strata_table *t = open_table("counters.l1", opts_of(4u << 20));
    uint64_t v = 0;
    REQUIRE(t);
    CHECK(counter(t, STRATA_OP_INCR, "n", 1, 0, 0, &v) == STRATA_NOT_FOUND);
    CHECK(counter(t, STRATA_OP_INCR, "n", 1, 1, 10, &v) == STRATA_OK && v == 10);
    CHECK(counter(t, STRATA_OP_INCR, "n", 5, 1, 99, &v) == STRATA_OK && v == 15);
    CHECK(get_is(t, "n", "15"));
    CHECK(counter(t, STRATA_OP_DECR, "n", 100, 0, 0, &v) == STRATA_OK && v == 0);
    CHECK(set(t, "max", "18446744073709551615") == STRATA_OK);
    CHECK(counter(t, STRATA_OP_INCR, "max", 2, 0, 0, &v) == STRATA_OK && v == 1);
    CHECK(set(t, "text", "12a") == STRATA_OK);
    CHECK(counter(t, STRATA_OP_INCR, "text", 1, 0, 0, &v) == STRATA_NOT_NUMBER);
    CHECK(set(t, "big", "18446744073709551616") == STRATA_OK);
    CHECK(counter(t, STRATA_OP_INCR, "big", 1, 0, 0, &v) == STRATA_NOT_NUMBER);
    CHECK(get_is(t, "text", "12a"));
    strata_close(t);
}

static void test_too_large(void)
{
    strata_options o = opts_of(4u << 20);
    strata_table *t;
    const strata_geometry *g;
    char *big;
    strata_stats st;
    o.segment_size = 64u << 10;
    t = open_table("large.l1", o);
    REQUIRE(t);
    g = strata_geometry_of(t);
    CHECK(g->max_value_size == (64u << 10) - 40);
    big = calloc(1, g->max_value_size + 1);
    REQUIRE(big);
    CHECK(set(t, "k", "old") == STRATA_OK);
    CHECK(put(t, STRATA_OP_SET, "k", big, g->max_value_size, 0, 0) == STRATA_TOO_LARGE);
    CHECK(get_is(t, "k", "old"));
    CHECK(put(t, STRATA_OP_SET, "k", big, g->max_value_size - 1, 0, 0) == STRATA_OK); /* exactly fits */
    {
        static buf b;
        CHECK(get(t, "k", &b, NULL) == STRATA_OK && b.len == g->max_value_size - 1);
    }
    strata_stats_get(t, &st);
    CHECK(st.counters.too_large == 1);
    free(big);
    strata_close(t);
}

/* A write with a head stores head then value as one value (one checksum over both), and the
 * limit counts both parts; a head alone, or a value alone, is a value too. */
static void test_head_and_value(void)
{
    strata_options o = opts_of(4u << 20);
    strata_table *t;
    const strata_geometry *g;
    strata_write_req r;
    char *big;
    static buf b;
    o.segment_size = 64u << 10;
    t = open_table("head.l1", o);
    REQUIRE(t);
    g = strata_geometry_of(t);
    memset(&r, 0, sizeof r);
    r.op = STRATA_OP_SET;
    r.key = "k";
    r.key_len = 1;
    r.head = "head:";
    r.head_len = 5;
    r.value = "value";
    r.value_len = 5;
    CHECK(strata_write(t, &r, 1) == STRATA_OK);
    CHECK(get_is(t, "k", "head:value"));
    r.op = STRATA_OP_ADD;
    r.key = "h";
    r.value = NULL;
    r.value_len = 0;
    CHECK(strata_write(t, &r, 1) == STRATA_OK);
    CHECK(get_is(t, "h", "head:"));

    big = calloc(1, g->max_value_size);
    REQUIRE(big);
    r.op = STRATA_OP_SET;
    r.key = "k";
    r.head = big;
    r.head_len = g->max_value_size / 2;
    r.value = big + r.head_len;
    r.value_len = g->max_value_size - r.head_len; /* with the key: one byte too many */
    CHECK(strata_write(t, &r, 1) == STRATA_TOO_LARGE);
    CHECK(get_is(t, "k", "head:value"));
    r.value_len--;
    memset(big, 'x', r.head_len);
    CHECK(strata_write(t, &r, 1) == STRATA_OK);
    CHECK(get(t, "k", &b, NULL) == STRATA_OK && b.len == g->max_value_size - 1 && b.data[0] == 'x' &&
          b.data[b.len - 1] == 0);
    r.head_len = SIZE_MAX; /* no overflow past the limit check */
    CHECK(strata_write(t, &r, 1) == STRATA_TOO_LARGE);
    free(big);
    strata_close(t);
}

/* A full table evicts old, unread entries; recently read ("hot") ones survive; it never wipes. */
static void test_eviction(void)
{
    strata_options o = opts_of(1u << 20);
    strata_table *t;
    char key[32], val[200];
    int hot_ok = 0, recent_ok = 0, n = 40000;
    strata_stats st;
    o.shards = 1;
    o.segment_size = 32u << 10;
    t = open_table("evict.l1", o);
    REQUIRE(t);
    memset(val, 'v', sizeof val);
    for (int i = 0; i < 50; i++) {
        snprintf(key, sizeof key, "hot-%d", i);
        CHECK(put(t, STRATA_OP_SET, key, val, 100, 0, 0) == STRATA_OK);
    }
    /* Bound: n writes, each followed by reads of a few hot keys. */
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "cold-%d", i);
        if (put(t, STRATA_OP_SET, key, val, 100 + i % 50, 0, 0) != STRATA_OK) {
            CHECK(!"set failed under pressure");
            break;
        }
        if (i % 20 == 0)
            for (int h = 0; h < 50; h++) {
                snprintf(key, sizeof key, "hot-%d", h);
                get_is(t, key, NULL);
            }
    }
    for (int h = 0; h < 50; h++) {
        snprintf(key, sizeof key, "hot-%d", h);
        static buf b;
        if (get(t, key, &b, NULL) == STRATA_OK && b.len == 100) hot_ok++;
    }
    for (int i = n - 500; i < n; i++) {
        static buf b;
        snprintf(key, sizeof key, "cold-%d", i);
        if (get(t, key, &b, NULL) == STRATA_OK && b.len == (size_t)(100 + i % 50)) recent_ok++;
    }
    strata_stats_get(t, &st);
    printf("        eviction: %d/50 hot kept, %d/500 most recent kept, %llu entries, %llu evictions\n", hot_ok,
           recent_ok, (unsigned long long)st.entries, (unsigned long long)st.counters.evictions);
    CHECK(hot_ok >= 45);
    CHECK(recent_ok >= 450);
    CHECK(st.counters.evictions > 0);
    CHECK(st.entries > 2000); /* roughly 1 MiB of ~160-byte items: never wiped */
    strata_close(t);
}

static int keys_count;
static void count_key(void *ctx, const void *key, size_t len)
{
    (void)ctx;
    (void)key;
    if (len) keys_count++;
}

static void test_keys_clear_stats(void)
{
    strata_table *t = open_table("keys.l1", opts_of(4u << 20));
    strata_stats st;
    char key[32];
    REQUIRE(t);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "key-%d", i);
        CHECK(set(t, key, "v") == STRATA_OK);
    }
    keys_count = 0;
    strata_keys(t, count_key, NULL);
    CHECK(keys_count == 100);
    strata_stats_get(t, &st);
    CHECK(st.entries == 100);
    CHECK(st.counters.sets == 100);
    CHECK(strata_clear(t) == STRATA_OK);
    keys_count = 0;
    strata_keys(t, count_key, NULL);
    CHECK(keys_count == 0);
    CHECK(get_is(t, "key-1", NULL));
    CHECK(set(t, "after", "clear") == STRATA_OK && get_is(t, "after", "clear"));
    strata_close(t);
}

static void test_geometry(void)
{
    strata_options o = opts_of(1u << 20);
    strata_geometry g;
    const char *what;
    CHECK(strata_geometry_resolve(&o, &g, &what) == STRATA_OK);
    CHECK(g.data_offset + g.data_bytes <= g.size);
    CHECK(g.segments_per_shard >= 2);
    o.size = 1000;
    CHECK(strata_geometry_resolve(&o, &g, &what) == STRATA_EINVAL && what != NULL);
    o = opts_of(1u << 20);
    o.shards = 3;
    CHECK(strata_geometry_resolve(&o, &g, &what) == STRATA_EINVAL);
    o.shards = 256;
    o.segment_size = 4u << 20;
    CHECK(strata_geometry_resolve(&o, &g, &what) == STRATA_EGEOMETRY);
    o = opts_of(64u << 20);
    o.slots = 100000;
    CHECK(strata_geometry_resolve(&o, &g, &what) == STRATA_OK && g.slots >= 100000 && g.slots < 100000 + 16 * 7);
    o = opts_of(64u << 20);
    CHECK(strata_geometry_resolve(&o, &g, &what) == STRATA_OK);
    /* metadata budget: header 24 + index bytes per slot at the default load stays under 48 */
    CHECK((double)(g.slots ? (g.data_offset - g.index_offset) : 0) / (double)g.slots < 9.2);
}

/* Random damage to the index and data regions: every operation must still terminate without a
 * crash, a value read back is either absent or one that was written under that key, and keys
 * reports only keys that were written ("k0".."k199"). */
static int collect_count, collect_foreign;
static void collect_key(void *ctx, const void *key, size_t len)
{
    char text[16];
    int n = -1, end = 0;
    (void)ctx;
    collect_count++;
    if (len < 2 || len >= sizeof text) {
        collect_foreign++;
        return;
    }
    memcpy(text, key, len);
    text[len] = 0;
    if (sscanf(text, "k%d%n", &n, &end) != 1 || (size_t)end != len || n < 0 || n >= 200) collect_foreign++;
}

static void test_corruption_fuzz(void)
{
    strata_options o = opts_of(1u << 20);
    strata_table *t;
    const strata_geometry *g;
    char key[32], val[600];
    static buf b;
    int fd, wrong = 0;
    uint64_t removed, seed = 12345;
    o.shards = 2;
    o.segment_size = 16u << 10;
    t = open_table("fuzz.l1", o);
    REQUIRE(t);
    g = strata_geometry_of(t);
    fd = open(scratch_path("fuzz.l1"), O_RDWR);
    REQUIRE(fd >= 0);
    /* Bound: rounds x (writes + damage + reads). */
    for (int round = 0; round < (quick ? 20 : 200); round++) {
        for (int i = 0; i < 200; i++) {
            size_t len = 40 + (size_t)(i * 7 % 500);
            snprintf(key, sizeof key, "k%d", i);
            make_value(key, (uint64_t)round, val, len);
            put(t, STRATA_OP_SET, key, val, len, (i % 3) ? 0 : 60000, 0);
        }
        for (int d = 0; d < 64; d++) {
            uint64_t off, span = g->size - g->index_offset;
            uint8_t junk[8];
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            off = g->index_offset + (seed >> 20) % span;
            memcpy(junk, &seed, sizeof junk);
            if (pwrite(fd, junk, 1 + (seed >> 60) % 8, (off_t)off) < 0) break;
        }
        for (int i = 0; i < 200; i++) {
            snprintf(key, sizeof key, "k%d", i);
            if (get(t, key, &b, NULL) == STRATA_OK && !value_ok(key, b.data, b.len)) wrong++;
        }
        collect_count = 0;
        strata_keys(t, collect_key, NULL);
        if (round % 10 == 0) strata_cleanup(t, &removed);
    }
    close(fd);
    CHECK(collect_foreign == 0);
    {
        strata_stats st;
        strata_stats_get(t, &st);
        printf("        fuzz: %llu hits, %llu misses, %llu damaged reads caught\n", (unsigned long long)st.counters.hits,
               (unsigned long long)st.counters.misses, (unsigned long long)st.counters.torn_reads);
    }
    CHECK(wrong == 0);
    strata_close(t);
}

/* Offset of the first occurrence of needle in the file, or -1. */
static off_t file_find(const char *name, const void *needle, size_t len)
{
    int fd = open(scratch_path(name), O_RDONLY);
    struct stat st;
    char *data;
    off_t at = -1;
    if (fd < 0) return -1;
    if (fstat(fd, &st) == 0 && (data = malloc((size_t)st.st_size)) != NULL) {
        if (pread(fd, data, (size_t)st.st_size, 0) == st.st_size) {
            char *p = memmem(data, (size_t)st.st_size, needle, len);
            if (p) at = p - data;
        }
        free(data);
    }
    close(fd);
    return at;
}

static int keys_seen_alpha, keys_seen_other;
static void keys_note(void *ctx, const void *key, size_t len)
{
    (void)ctx;
    if (len == 11 && memcmp(key, "alpha-key-1", 11) == 0)
        keys_seen_alpha++;
    else
        keys_seen_other++;
}

/* keys checks what get checks: a key whose bytes or value were damaged is no key. */
static void test_keys_skip_damaged(void)
{
    strata_table *t = open_table("keysdmg.l1", opts_of(2u << 20));
    off_t at;
    char flip;
    REQUIRE(t);
    CHECK(set(t, "alpha-key-1", "alpha value") == STRATA_OK);
    CHECK(set(t, "bravo-key-2", "bravo value") == STRATA_OK);
    strata_keys(t, keys_note, NULL);
    CHECK(keys_seen_alpha == 1 && keys_seen_other == 1);

    at = file_find("keysdmg.l1", "bravo-key-2", 11); /* a key byte: "bravo-kez-2" */
    REQUIRE(at > 0);
    flip = 'z';
    corrupt_at("keysdmg.l1", at + 8, &flip, 1);
    at = file_find("keysdmg.l1", "alpha value", 11); /* a value byte */
    REQUIRE(at > 0);
    corrupt_at("keysdmg.l1", at, &flip, 1);
    keys_seen_alpha = keys_seen_other = 0;
    strata_keys(t, keys_note, NULL);
    CHECK(keys_seen_alpha == 0 && keys_seen_other == 0);
    CHECK(get_is(t, "alpha-key-1", NULL) && get_is(t, "bravo-key-2", NULL) && get_is(t, "bravo-kez-2", NULL));
    strata_close(t);
}

/* Between the writer's validation of the shard (active segment, fill) and its use of them, a
 * process that can write the file scribbles over both. The writer must use what it validated:
 * before, ensure_space and item_append read them again and wrote out of bounds (ASan). */
extern void (*strata_test_after_shard_check)(strata_table *t, uint32_t shard);
static int scribble_fd, scribble_active;
static void scribble(strata_table *t, uint32_t shard)
{
    const strata_geometry *g = strata_geometry_of(t);
    uint64_t ctl = g->ctl_offset + (uint64_t)shard * 128 + sizeof(pthread_mutex_t);
    uint64_t shard_data = g->data_offset + (uint64_t)shard * g->segments_per_shard * g->segment_size;
    uint32_t active = 0, huge = 0x7ffffff0u, fill = g->segment_size + 4096;
    if (pread(scribble_fd, &active, 4, (off_t)ctl) != 4 || active >= g->segments_per_shard) active = 0;
    if (pwrite(scribble_fd, &fill, 4, (off_t)(shard_data + (uint64_t)active * g->segment_size)) != 4 ||
        (scribble_active && pwrite(scribble_fd, &huge, 4, (off_t)ctl) != 4))
        perror("scribble");
}

static void test_geometry_changed_under_writer(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t;
    char key[32], val[3000];
    int ok = 1;
    o.shards = 1;
    o.segment_size = 16u << 10;
    t = open_table("scribble.l1", o);
    REQUIRE(t);
    scribble_fd = open(scratch_path("scribble.l1"), O_RDWR);
    REQUIRE(scribble_fd >= 0);
    memset(val, 'v', sizeof val);
    /* Bound: 40 writes, each scribbled over once: the active segment's fill every time (the
     * writers rotate through the segments meanwhile), the active segment's index once (the
     * next writer then finds it out of range and drops the shard). */
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof key, "scribbled-%d", i);
        scribble_active = i == 20;
        strata_test_after_shard_check = scribble;
        if (put(t, STRATA_OP_SET, key, val, sizeof val, 0, 0) != STRATA_OK) ok = 0;
        strata_test_after_shard_check = NULL;
        if (!ok) break;
        {
            static buf b;
            ok = get(t, key, &b, NULL) == STRATA_OK && b.len == sizeof val && memcmp(b.data, val, sizeof val) == 0;
        }
        if (!ok) break;
    }
    CHECK(ok);
    strata_test_after_shard_check = NULL;
    CHECK(set(t, "after", "fine") == STRATA_OK && get_is(t, "after", "fine"));
    close(scribble_fd);
    strata_close(t);
}

/* ------------------------------------------------------------------------------------------ */
/* Files: rebuild and refusal                                                                 */
/* ------------------------------------------------------------------------------------------ */

static strata_status open_reason(const char *name, strata_options o, const char **reason, strata_table **t)
{
    int err = 0;
    return strata_open(scratch_path(name), &o, t, reason, &err);
}

static void corrupt_at(const char *name, off_t off, const void *bytes, size_t len)
{
    int fd = open(scratch_path(name), O_RDWR);
    if (fd >= 0) {
        if (pwrite(fd, bytes, len, off) != (ssize_t)len) perror("pwrite");
        close(fd);
    }
}

static void test_rebuild(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t = NULL;
    const char *reason = NULL;
    uint32_t bad = 0xdeadbeef, initializing = 1;
    struct stat st;

    CHECK(open_reason("rebuild.l1", o, &reason, &t) == STRATA_OK && reason == NULL);
    REQUIRE(t);
    CHECK(set(t, "k", "v") == STRATA_OK);
    strata_close(t);
    CHECK(open_reason("rebuild.l1", o, &reason, &t) == STRATA_OK && reason == NULL);
    REQUIRE(t);
    CHECK(get_is(t, "k", "v")); /* a valid file is reused */
    strata_close(t);

    corrupt_at("rebuild.l1", 8, &bad, sizeof bad); /* layout version */
    CHECK(open_reason("rebuild.l1", o, &reason, &t) == STRATA_OK && reason && strstr(reason, "version"));
    REQUIRE(t);
    CHECK(get_is(t, "k", NULL));
    CHECK(set(t, "k", "v2") == STRATA_OK);
    strata_close(t);

    corrupt_at("rebuild.l1", 12, &initializing, sizeof initializing); /* state */
    CHECK(open_reason("rebuild.l1", o, &reason, &t) == STRATA_OK && reason && strstr(reason, "never completed"));
    strata_close(t);

    corrupt_at("rebuild.l1", 40, &bad, sizeof bad); /* shards: header check catches it */
    CHECK(open_reason("rebuild.l1", o, &reason, &t) == STRATA_OK && reason != NULL);
    strata_close(t);

    CHECK(truncate(scratch_path("rebuild.l1"), 100000) == 0);
    CHECK(open_reason("rebuild.l1", o, &reason, &t) == STRATA_OK && reason != NULL);
    strata_close(t);
    CHECK(stat(scratch_path("rebuild.l1"), &st) == 0 && (uint64_t)st.st_size == o.size && (st.st_mode & 0777) == 0600);

    { /* a rebuilder killed before its rename left a temporary file: the next open removes it */
        int tfd = open(scratch_path("rebuild.l1.tmp-99999-0badf00d"), O_CREAT | O_RDWR, 0600);
        CHECK(tfd >= 0);
        if (tfd >= 0) close(tfd);
        CHECK(open_reason("rebuild.l1", o, &reason, &t) == STRATA_OK && reason == NULL);
        strata_close(t);
        CHECK(access(scratch_path("rebuild.l1.tmp-99999-0badf00d"), F_OK) != 0);
    }

    { /* another geometry: rebuilt, not reused; the file it replaced is retired for its users */
        strata_table *old = NULL, *adopted = NULL;
        CHECK(open_reason("rebuild.l1", o, &reason, &old) == STRATA_OK && reason == NULL);
        REQUIRE(old);
        CHECK(!strata_retired(old));
        o.size = 3u << 20;
        CHECK(open_reason("rebuild.l1", o, &reason, &t) == STRATA_OK && reason && strstr(reason, "geometry"));
        REQUIRE(t);
        CHECK(strata_retired(old));
        CHECK(!strata_retired(t));
        CHECK(set(t, "k", "3 MiB") == STRATA_OK);

        o.size = 2u << 20; /* adopt: the file's own geometry, so nothing is rebuilt back */
        o.adopt = 1;
        CHECK(open_reason("rebuild.l1", o, &reason, &adopted) == STRATA_OK && reason == NULL);
        REQUIRE(adopted);
        CHECK(strata_geometry_of(adopted)->size == 3u << 20);
        CHECK(get_is(adopted, "k", "3 MiB"));
        CHECK(!strata_retired(t));
        strata_close(adopted);
        strata_close(old);
        o.adopt = 0;
    }
    strata_close(t);

    { /* a file left retired (its rebuild failed) is rebuilt by the next opener */
        uint32_t retired = 3;
        o.size = 3u << 20;
        corrupt_at("rebuild.l1", 12, &retired, sizeof retired);
        CHECK(open_reason("rebuild.l1", o, &reason, &t) == STRATA_OK && reason && strstr(reason, "retired"));
        strata_close(t);
    }
}

/* The file header as table.c lays it out (table.h), to forge one from another boot. */
struct header_mirror {
    uint64_t magic;
    uint32_t version, state;
    uint64_t fingerprint, file_size;
    uint32_t shards, buckets_per_shard, segments_per_shard, segment_size;
    uint64_t ctl_offset, index_offset, data_offset, seed;
    uint32_t creator_uid, creator_pid;
    uint64_t created_ms, boot_id, check;
};

static uint64_t mirror_check(const struct header_mirror *h)
{
    struct header_mirror copy = *h;
    copy.state = 0;
    copy.check = 0;
    return strata_hash64(&copy, sizeof copy, 0x314C415441525453ULL);
}

/* Make name's header say it was built under another boot, keeping it otherwise valid. */
/* Rewrite the file's boot id: xor it with flip, or set it to 0 when flip is 0. */
static int forge_boot_id(const char *name, uint64_t flip)
{
    struct header_mirror h;
    int fd = open(scratch_path(name), O_RDWR), ok = 0;
    if (fd < 0) return 0;
    if (pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && h.check == mirror_check(&h)) {
        h.boot_id = flip ? h.boot_id ^ flip : 0;
        h.check = mirror_check(&h);
        ok = pwrite(fd, &h, sizeof h, 0) == (ssize_t)sizeof h;
    }
    close(fd);
    return ok;
}

static int forge_other_boot(const char *name) { return forge_boot_id(name, 0x5a5a); }

static int copy_file(const char *from, const char *to)
{
    int in = open(scratch_path(from), O_RDONLY), out = open(scratch_path(to), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char chunk[65536];
    ssize_t n;
    int ok = in >= 0 && out >= 0;
    while (ok && (n = read(in, chunk, sizeof chunk)) > 0) ok = write(out, chunk, (size_t)n) == n;
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    return ok;
}

/* A robust mutex is marked owner-dead only by the kernel, at its owner's exit, through the
 * owner's mapping. A lock word saved while held (a file on disk across a reboot; here a copy
 * of the file taken while a child held a shard) stays held for good. The header's boot id sends
 * a file from another boot to a rebuild. */
static void test_other_boot_rebuilds(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t = NULL;
    const char *reason = NULL;
    uint32_t shard;
    int pipefd[2], status;
    char c;
    pid_t pid;
    o.lock_timeout_ns = 10 * 1000 * 1000;

    CHECK(open_reason("boot.l1", o, &reason, &t) == STRATA_OK && reason == NULL);
    REQUIRE(t);
    CHECK(set(t, "k", "v") == STRATA_OK);
    shard = strata_shard_for(t, "k", 1);
    REQUIRE(pipe(pipefd) == 0);
    pid = fork();
    if (pid == 0) {
        strata_table *ct = open_table("boot.l1", o);
        if (!ct || strata_lock_shard(ct, shard, 1) != STRATA_OK) _exit(1);
        if (write(pipefd[1], "x", 1) != 1) _exit(1);
        for (;;) pause();
    }
    close(pipefd[1]);
    REQUIRE(read(pipefd[0], &c, 1) == 1);
    close(pipefd[0]);
    CHECK(copy_file("boot.l1", "boot-held.l1") && copy_file("boot.l1", "boot-other.l1"));
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    strata_close(t);

    /* Same boot: valid, and its copied lock word can never be taken. */
    CHECK(open_reason("boot-held.l1", o, &reason, &t) == STRATA_OK && reason == NULL);
    REQUIRE(t);
    CHECK(set(t, "k", "w") == STRATA_LOCK_TIMEOUT);
    strata_close(t);

    /* Another boot: rebuilt, empty and writable. */
    CHECK(forge_other_boot("boot-other.l1"));
    CHECK(open_reason("boot-other.l1", o, &reason, &t) == STRATA_OK && reason && strstr(reason, "reboot"));
    REQUIRE(t);
    CHECK(get_is(t, "k", NULL));
    CHECK(set(t, "k", "w") == STRATA_OK && get_is(t, "k", "w"));
    strata_close(t);
    CHECK(open_reason("boot-other.l1", o, &reason, &t) == STRATA_OK && reason == NULL); /* now this boot's */
    strata_close(t);
}

extern const char *strata_test_boot_id_path;

/* A boot id of 0 (unreadable /proc) is unknown, in the file or in the opener: accepted, or
 * processes with and without /proc would rebuild each other's file for ever. */
static void test_unknown_boot_accepted(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t = NULL;
    const char *reason = NULL, *real = strata_test_boot_id_path;

    /* A file whose builder had no boot id, opened by a process that has one. */
    CHECK(open_reason("boot0.l1", o, &reason, &t) == STRATA_OK && reason == NULL);
    REQUIRE(t);
    CHECK(set(t, "k", "v") == STRATA_OK);
    strata_close(t);
    CHECK(forge_boot_id("boot0.l1", 0));
    CHECK(open_reason("boot0.l1", o, &reason, &t) == STRATA_OK && reason == NULL);
    REQUIRE(t);
    CHECK(get_is(t, "k", "v"));
    strata_close(t);

    /* A process without a boot id opening a file that has one, and building one without. */
    strata_test_boot_id_path = scratch_path("no-boot-id-here");
    CHECK(open_reason("boot1.l1", o, &reason, &t) == STRATA_OK && reason == NULL);
    REQUIRE(t);
    CHECK(set(t, "k", "w") == STRATA_OK);
    strata_close(t);
    strata_test_boot_id_path = real;
    CHECK(open_reason("boot1.l1", o, &reason, &t) == STRATA_OK && reason == NULL);
    REQUIRE(t);
    CHECK(get_is(t, "k", "w"));
    strata_close(t);
    strata_test_boot_id_path = scratch_path("no-boot-id-here");
    CHECK(open_reason("boot1.l1", o, &reason, &t) == STRATA_OK && reason == NULL);
    strata_test_boot_id_path = real;
    REQUIRE(t);
    CHECK(get_is(t, "k", "w"));
    strata_close(t);
}

static void test_unsafe_files(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t = NULL;
    const char *reason = NULL;
    int fd = open(scratch_path("shared.l1"), O_CREAT | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    close(fd);
    CHECK(chmod(scratch_path("shared.l1"), 0666) == 0);
    CHECK(open_reason("shared.l1", o, &reason, &t) == STRATA_EUNSAFE && t == NULL);
    CHECK(chmod(scratch_path("shared.l1"), 0620) == 0);
    CHECK(open_reason("shared.l1", o, &reason, &t) == STRATA_EUNSAFE);
    CHECK(symlink(scratch_path("shared.l1"), scratch_path("link.l1")) == 0);
    CHECK(open_reason("link.l1", o, &reason, &t) == STRATA_EUNSAFE);
    CHECK(mkdir(scratch_path("adir.l1"), 0700) == 0);
    CHECK(open_reason("adir.l1", o, &reason, &t) != STRATA_OK);

    /* readable by group or others: refused, not made private behind the reader's back */
    CHECK(chmod(scratch_path("shared.l1"), 0640) == 0);
    CHECK(open_reason("shared.l1", o, &reason, &t) == STRATA_EUNSAFE);
    CHECK(chmod(scratch_path("shared.l1"), 0604) == 0);
    CHECK(open_reason("shared.l1", o, &reason, &t) == STRATA_EUNSAFE);
    CHECK(chmod(scratch_path("shared.l1"), 0600) == 0);
    CHECK(open_reason("shared.l1", o, &reason, &t) == STRATA_OK && t);
    strata_close(t);

    /* a second hard link, by either name */
    CHECK(link(scratch_path("shared.l1"), scratch_path("hardlink.l1")) == 0);
    CHECK(open_reason("shared.l1", o, &reason, &t) == STRATA_EUNSAFE);
    CHECK(open_reason("hardlink.l1", o, &reason, &t) == STRATA_EUNSAFE);
    CHECK(unlink(scratch_path("hardlink.l1")) == 0);
    CHECK(open_reason("shared.l1", o, &reason, &t) == STRATA_OK && t);
    strata_close(t);
}

/* Whether the file at name holds exactly these bytes. */
static int file_is(const char *name, const char *want)
{
    char got[256];
    int fd = open(scratch_path(name), O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, got, sizeof got);
    if (fd >= 0) close(fd);
    return n == (ssize_t)strlen(want) && memcmp(got, want, (size_t)n) == 0;
}

static void write_file(const char *name, const char *bytes, mode_t mode)
{
    int fd = open(scratch_path(name), O_CREAT | O_TRUNC | O_WRONLY, mode);
    if (fd < 0 || write(fd, bytes, strlen(bytes)) != (ssize_t)strlen(bytes)) perror("write_file");
    if (fd >= 0) close(fd);
}

/* Only an empty file or one with our magic number is ever (re)built; anything else is left as
 * it is, whatever name it has. */
static void test_foreign_files(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t = NULL;
    const char *reason = NULL;
    struct stat st;
    uint32_t bad = 0xdeadbeef;

    write_file("notes.l1", "somebody's notes\n", 0600);
    CHECK(open_reason("notes.l1", o, &reason, &t) == STRATA_EFOREIGN && t == NULL);
    CHECK(file_is("notes.l1", "somebody's notes\n"));
    write_file("tiny.l1", "abc", 0600); /* shorter than the magic number */
    CHECK(open_reason("tiny.l1", o, &reason, &t) == STRATA_EFOREIGN);
    CHECK(file_is("tiny.l1", "abc"));

    /* a table whose magic number is damaged is no longer recognisably ours */
    CHECK(open_reason("damaged.l1", o, &reason, &t) == STRATA_OK && t);
    strata_close(t);
    corrupt_at("damaged.l1", 0, &bad, sizeof bad);
    CHECK(stat(scratch_path("damaged.l1"), &st) == 0);
    CHECK(open_reason("damaged.l1", o, &reason, &t) == STRATA_EFOREIGN && t == NULL);
    {
        struct stat after;
        uint32_t magic = 0;
        int fd = open(scratch_path("damaged.l1"), O_RDONLY);
        CHECK(fd >= 0 && pread(fd, &magic, sizeof magic, 0) == (ssize_t)sizeof magic && magic == bad);
        if (fd >= 0) close(fd);
        CHECK(stat(scratch_path("damaged.l1"), &after) == 0 && after.st_ino == st.st_ino);
    }

    /* an empty file is built in place, silently */
    write_file("empty.l1", "", 0600);
    CHECK(open_reason("empty.l1", o, &reason, &t) == STRATA_OK && t && reason == NULL);
    strata_close(t);
    CHECK(strcmp(strata_strerror(STRATA_EFOREIGN), "unknown status") != 0);
}

/* The directory is trusted only if it is ours, writable by nobody else, and not a symlink; all
 * later lookups are relative to it, so a rebuild can't land anywhere else. */
static void test_unsafe_dirs(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t = NULL;
    const char *reason = NULL;
    uint32_t bad = 0xdeadbeef;
    struct stat st;

    CHECK(mkdir(scratch_path("open"), 0700) == 0);
    CHECK(open_reason("open/t.l1", o, &reason, &t) == STRATA_OK && t);
    strata_close(t);
    CHECK(chmod(scratch_path("open"), 0777) == 0);
    CHECK(open_reason("open/t.l1", o, &reason, &t) == STRATA_EUNSAFE_DIR && t == NULL);
    CHECK(chmod(scratch_path("open"), 0720) == 0);
    CHECK(open_reason("open/t.l1", o, &reason, &t) == STRATA_EUNSAFE_DIR);
    CHECK(chmod(scratch_path("open"), 0755) == 0); /* readable is fine: the file itself is 0600 */
    CHECK(open_reason("open/t.l1", o, &reason, &t) == STRATA_OK && t);
    strata_close(t);

    /* a symlinked parent is refused, and nothing is built or rebuilt through it */
    CHECK(symlink(scratch_path("open"), scratch_path("via")) == 0);
    CHECK(open_reason("via/t.l1", o, &reason, &t) == STRATA_EUNSAFE_DIR);
    CHECK(open_reason("via/new.l1", o, &reason, &t) == STRATA_EUNSAFE_DIR);
    CHECK(access(scratch_path("open/new.l1"), F_OK) != 0);
    corrupt_at("open/t.l1", 8, &bad, sizeof bad);
    CHECK(stat(scratch_path("open/t.l1"), &st) == 0);
    CHECK(open_reason("via/t.l1", o, &reason, &t) == STRATA_EUNSAFE_DIR);
    {
        struct stat after;
        CHECK(stat(scratch_path("open/t.l1"), &after) == 0 && after.st_ino == st.st_ino);
    }

    /* owned by another user: only root can set that up */
    if (geteuid() == 0) {
        CHECK(chown(scratch_path("open"), 65534, 65534) == 0);
        CHECK(open_reason("open/t.l1", o, &reason, &t) == STRATA_EUNSAFE_DIR);
        CHECK(chown(scratch_path("open"), 0, 0) == 0);
    } else {
        printf("        unsafe_dirs: not root, another owner's directory not tried\n");
    }
    CHECK(open_reason("open/t.l1", o, &reason, &t) == STRATA_OK && t && reason && strstr(reason, "version"));
    strata_close(t);
}

/* ------------------------------------------------------------------------------------------ */
/* Processes                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* A value that proves itself: "<key>|<n>|" then filler derived from key and n, then a hash. */
static size_t make_value(const char *key, uint64_t n, char *out, size_t len)
{
    size_t head = (size_t)snprintf(out, len, "%s|%llu|", key, (unsigned long long)n);
    uint64_t h;
    for (size_t i = head; i < len - 8; i++) out[i] = (char)('a' + (n + i) % 26);
    h = strata_hash64(out, len - 8, 42);
    memcpy(out + len - 8, &h, 8);
    return len;
}

static int value_ok(const char *key, const char *v, size_t len)
{
    char expect[4200];
    unsigned long long n;
    char prefix[64];
    if (len < 40 || len > sizeof expect) return 0;
    snprintf(prefix, sizeof prefix, "%s|", key);
    if (strncmp(v, prefix, strlen(prefix)) != 0) return 0;
    if (sscanf(v + strlen(prefix), "%llu|", &n) != 1) return 0;
    make_value(key, n, expect, len);
    return memcmp(expect, v, len) == 0;
}

static void writer_proc(const char *name, int id, uint64_t until_ms)
{
    strata_table *t = open_table(name, opts_of(2u << 20));
    char key[32], val[4200];
    uint64_t n = 0;
    if (!t) _exit(2);
    /* Bound: until the deadline. */
    while (mono_ms() < until_ms) {
        size_t len = 40 + (n * 37 + (uint64_t)id * 11) % 4000;
        snprintf(key, sizeof key, "key-%llu", (unsigned long long)(n % 300));
        make_value(key, n, val, len);
        if (put(t, STRATA_OP_SET, key, val, len, 0, 0) != STRATA_OK) {
            /* lock timeouts are allowed under load; anything else is a failure */
        }
        n++;
    }
    strata_close(t);
    _exit(0);
}

static void reader_proc(const char *name, uint64_t until_ms)
{
    strata_table *t = open_table(name, opts_of(2u << 20));
    static buf b;
    char key[32];
    uint64_t n = 0, bad = 0, hits = 0;
    if (!t) _exit(2);
    /* Bound: until the deadline, and at least one pass over the 300 keys (a child started late
     * under valgrind may find the deadline passed already). */
    while (mono_ms() < until_ms || n < 300) {
        snprintf(key, sizeof key, "key-%llu", (unsigned long long)(n++ % 300));
        if (get(t, key, &b, NULL) == STRATA_OK) {
            hits++;
            if (!value_ok(key, b.data, b.len)) bad++;
        }
    }
    strata_close(t);
    if (bad) fprintf(stderr, "  reader: %llu wrong values\n", (unsigned long long)bad);
    _exit(bad ? 1 : (hits ? 0 : 3));
}

static void test_multiprocess(void)
{
    const char *name = "multi.l1";
    uint64_t until = mono_ms() + (quick ? 400 : 1500);
    pid_t pids[4];
    int ok = 1;
    strata_table *t = open_table(name, opts_of(2u << 20));
    REQUIRE(t);
    { /* every key holds a value before the readers start, so a reader that runs at all hits */
        char key[32], val[100];
        for (int n = 0; n < 300; n++) {
            snprintf(key, sizeof key, "key-%d", n);
            CHECK(put(t, STRATA_OP_SET, key, val, make_value(key, 0, val, sizeof val), 0, 0) == STRATA_OK);
        }
    }
    strata_close(t);
    for (int i = 0; i < 4; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            if (i < 2)
                writer_proc(name, i, until);
            else
                reader_proc(name, until);
        }
    }
    for (int i = 0; i < 4; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "  child %d exit %d\n", i, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            ok = 0;
        }
    }
    CHECK(ok);
}

static void test_owner_died(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t = open_table("dead.l1", o);
    strata_stats st;
    uint32_t shard;
    pid_t pid;
    int status;
    REQUIRE(t);
    CHECK(set(t, "victim", "v") == STRATA_OK);
    shard = strata_shard_for(t, "victim", 6);
    pid = fork();
    if (pid == 0) {
        strata_table *c;
        strata_close(t); /* the parent's handle, inherited */
        c = open_table("dead.l1", o);
        if (!c || strata_lock_shard(c, shard, 1) != STRATA_OK) _exit(1);
        strata_close(c); /* keeps the mapping: the lock is still held */
        _exit(0);        /* dies holding the lock */
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(set(t, "victim", "after") == STRATA_OK);
    CHECK(get_is(t, "victim", "after"));
    strata_stats_get(t, &st);
    CHECK(st.counters.owner_died_recoveries == 1);
    strata_close(t);
}

static void test_stopped_holder(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t;
    uint32_t shard;
    int pipefd[2], status;
    char c;
    pid_t pid;
    strata_stats st;
    uint64_t start;
    o.lock_timeout_ns = 20 * 1000 * 1000;
    t = open_table("stopped.l1", o);
    REQUIRE(t);
    CHECK(set(t, "k", "v") == STRATA_OK);
    shard = strata_shard_for(t, "k", 1);
    REQUIRE(pipe(pipefd) == 0);
    pid = fork();
    if (pid == 0) {
        strata_table *ct = open_table("stopped.l1", o);
        if (!ct) _exit(1);
        {
            strata_status ls = strata_lock_shard(ct, shard, 1);
            if (ls != STRATA_OK) {
                fprintf(stderr, "  child lock: %s\n", strata_strerror(ls));
                _exit(1);
            }
        }
        if (write(pipefd[1], "x", 1) != 1) _exit(1);
        for (;;) pause();
    }
    close(pipefd[1]);
    REQUIRE(read(pipefd[0], &c, 1) == 1);
    kill(pid, SIGSTOP);
    start = mono_ms();
    CHECK(set(t, "k", "blocked") == STRATA_LOCK_TIMEOUT);
    CHECK(mono_ms() - start < 1000);
    CHECK(get_is(t, "k", NULL)); /* the write failed: the old value must not be served */
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    CHECK(set(t, "k", "free") == STRATA_OK);
    CHECK(get_is(t, "k", "free"));
    strata_stats_get(t, &st);
    CHECK(st.counters.lock_timeouts == 1 && st.counters.owner_died_recoveries == 1);
    close(pipefd[0]);
    strata_close(t);
}

/* The open hook of a child that must stop where the hook is called at want. */
static int stop_at;
static void stop_self_at(int at)
{
    if (at == stop_at) raise(SIGSTOP);
}

/* The open hook that plays a rebuilder renaming a new file over the path between the opener's
 * nlink check and its mapping (once). */
static const char *rename_from, *rename_to;
static void rename_over_at_validate(int at)
{
    if (at != STRATA_OPEN_AT_VALIDATE || rename_from == NULL) return;
    if (rename(scratch_path(rename_from), scratch_path(rename_to)) != 0) perror("rename");
    rename_from = NULL;
}

/* An opener whose file is renamed over after its link check maps the new file, not the orphan
 * it opened (it would share nothing with later openers for life). */
static void test_replaced_while_opening(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *old_t = open_table("swap.l1", o), *new_t = open_table("swap-new.l1", o), *t, *later;
    REQUIRE(old_t && new_t);
    CHECK(set(old_t, "k", "old") == STRATA_OK);
    CHECK(set(new_t, "k", "new") == STRATA_OK);
    rename_from = "swap-new.l1";
    rename_to = "swap.l1";
    strata_open_test_hook = rename_over_at_validate;
    t = open_table("swap.l1", o);
    strata_open_test_hook = NULL;
    CHECK(rename_from == NULL);
    REQUIRE(t);
    CHECK(get_is(t, "k", "new"));
    later = open_table("swap.l1", o);
    REQUIRE(later);
    CHECK(set(later, "shared", "yes") == STRATA_OK && get_is(t, "shared", "yes"));
    strata_close(later);
    strata_close(t);
    strata_close(new_t);
    strata_close(old_t);
}

/* Forks a child that opens name with opts and stops itself at point `at` of the open (table.h:
 * strata_open_test_hook); returns once it is stopped there. It exits 0 if its open succeeded. */
static pid_t fork_stopped_opener(const char *name, strata_options o, int at)
{
    int status;
    pid_t pid = fork();
    if (pid == 0) {
        strata_table *t;
        stop_at = at;
        strata_open_test_hook = stop_self_at;
        t = open_table(name, o);
        if (t == NULL) _exit(1);
        strata_close(t);
        _exit(0);
    }
    if (waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status)) {
        fprintf(stderr, "  opener %d did not stop\n", (int)pid);
        return -1;
    }
    return pid;
}

/* Forks a child that takes the file's flock (as any opener might, at any point of its open) and
 * stops; returns once it is stopped holding the lock. */
static pid_t fork_stopped_flock_holder(const char *name)
{
    int status;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(scratch_path(name), O_RDWR);
        if (fd < 0 || flock(fd, LOCK_EX) != 0) _exit(1);
        raise(SIGSTOP);
        _exit(0);
    }
    if (waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status)) return -1;
    return pid;
}

static int reaped_ok(pid_t pid)
{
    int status;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* An opener stopped (SIGSTOP) at any point of its open never holds up the opening of a valid
 * file; one stopped while building a file holds up only openers of that unbuilt file, and only
 * for a bounded time. */
static void test_stopped_opener(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t = NULL, *t2 = NULL;
    const char *reason = NULL;
    uint32_t bad = 0xdeadbeef;
    uint64_t start;
    pid_t pid;

    t = open_table("sopen.l1", o);
    REQUIRE(t);
    CHECK(set(t, "k", "v") == STRATA_OK);
    strata_close(t);

    /* valid file, a process stopped holding its flock */
    pid = fork_stopped_flock_holder("sopen.l1");
    REQUIRE(pid > 0);
    CHECK(open_reason("sopen.l1", o, &reason, &t) == STRATA_OK && t && reason == NULL);
    CHECK(t && get_is(t, "k", "v"));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);

    /* valid file, a real opener stopped halfway */
    pid = fork_stopped_opener("sopen.l1", o, STRATA_OPEN_AT_VALIDATE);
    REQUIRE(pid > 0);
    CHECK(open_reason("sopen.l1", o, &reason, &t2) == STRATA_OK && t2 && reason == NULL);
    CHECK(t2 && get_is(t2, "k", "v"));
    strata_close(t2);
    kill(pid, SIGCONT);
    CHECK(reaped_ok(pid));

    /* a new file whose builder stopped with the lock: others give up in bounded time, then get
     * the file the builder finishes once continued */
    pid = fork_stopped_opener("sbuild.l1", o, STRATA_OPEN_AT_BUILD);
    REQUIRE(pid > 0);
    start = mono_ms();
    CHECK(open_reason("sbuild.l1", o, &reason, &t2) == STRATA_EFLOCK && t2 == NULL);
    CHECK(mono_ms() - start < 5000);
    kill(pid, SIGCONT);
    CHECK(reaped_ok(pid));
    CHECK(open_reason("sbuild.l1", o, &reason, &t2) == STRATA_OK && t2 && reason == NULL);
    strata_close(t2);

    /* a bad file whose rebuilder stopped with the lock, then was killed: the next opener
     * rebuilds it; the first handle still works on the file it mapped */
    corrupt_at("sopen.l1", 8, &bad, sizeof bad);
    pid = fork_stopped_opener("sopen.l1", o, STRATA_OPEN_AT_BUILD);
    REQUIRE(pid > 0);
    CHECK(open_reason("sopen.l1", o, &reason, &t2) == STRATA_EFLOCK);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK(open_reason("sopen.l1", o, &reason, &t2) == STRATA_OK && t2 && reason && strstr(reason, "version"));
    CHECK(t2 && get_is(t2, "k", NULL));
    strata_close(t2);
    CHECK(t && set(t, "still", "works") == STRATA_OK && get_is(t, "still", "works"));
    strata_close(t);
}

/* Fault injection: the next fallocate_eintr calls of posix_fallocate fail with EINTR, as tmpfs's
 * fallocate does on older kernels when any signal arrives (a profiler's timer, say; newer ones
 * stop only for a fatal signal, so a real signal can't show it here). table.c is linked into
 * this program, so this definition is the one it calls. */
static int fallocate_eintr;
int posix_fallocate(int fd, off_t offset, off_t len)
{
    if (fallocate_eintr > 0) {
        fallocate_eintr--;
        return EINTR;
    }
    return fallocate(fd, 0, offset, len) == 0 ? 0 : errno;
}

/* An interrupted reservation is retried: the file comes out fully reserved, never sparse (a
 * sparse table SIGBUSes its users when tmpfs fills up). One interrupted without end fails the
 * open and leaves nothing behind. */
static void test_build_interrupted(void)
{
    strata_options o = opts_of(32u << 20);
    strata_table *t = NULL;
    const char *reason = NULL;
    struct stat st;
    int err = 0;

    fallocate_eintr = 5;
    t = open_table("eintr.l1", o);
    REQUIRE(t);
    CHECK(fallocate_eintr == 0);
    CHECK(stat(scratch_path("eintr.l1"), &st) == 0 && (uint64_t)st.st_size == o.size);
    CHECK((uint64_t)st.st_blocks * 512 >= o.size);
    CHECK(set(t, "k", "v") == STRATA_OK && get_is(t, "k", "v"));
    strata_close(t);
    unlink(scratch_path("eintr.l1"));

    fallocate_eintr = 1000000;
    CHECK(strata_open(scratch_path("eintr.l1"), &o, &t, &reason, &err) == STRATA_EIO && err == EINTR && t == NULL);
    fallocate_eintr = 0;
    CHECK(stat(scratch_path("eintr.l1"), &st) == 0 && st.st_size == 0 && st.st_blocks == 0);
    unlink(scratch_path("eintr.l1"));
}

/* Keys of shard, "<prefix>-<n>", n counting from 0; returns how many were found (at most max). */
static int keys_on_shard(strata_table *t, uint32_t shard, const char *prefix, char keys[][32], int max)
{
    int n = 0;
    /* Bound: 100,000 candidates. */
    for (int i = 0; i < 100000 && n < max; i++) {
        snprintf(keys[n], 32, "%s-%d", prefix, i);
        if (strata_shard_for(t, keys[n], strlen(keys[n])) == shard) n++;
    }
    return n;
}

static int still_reading(strata_table *t, char keys[][32], int n)
{
    int count = 0;
    for (int i = 0; i < n; i++) count += get_is(t, keys[i], keys[i]);
    return count;
}

/* A write whose shard lock is held elsewhere (here: by this thread through a second handle, so
 * the table answers at once) fences its key: the key reads as a miss without the lock, a delete
 * succeeds, and the next lock holder drops the fenced items rather than unmasking them. A fence
 * covers 1/32 of its bucket, so of the shard's other keys at most 6 per fence miss with it. */
static void test_fenced_write(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t, *holder;
    static char keys[200][32];
    uint64_t v = 0;
    int n, fences = 0;
    o.shards = 2;
    t = open_table("fence.l1", o);
    holder = open_table("fence.l1", o);
    REQUIRE(t && holder);
    n = keys_on_shard(t, 0, "fk", keys, 200);
    REQUIRE(n == 200);
    for (int i = 0; i < n; i++) CHECK(set(t, keys[i], keys[i]) == STRATA_OK);
    CHECK(set(t, "counter", "5") == STRATA_OK);
    REQUIRE(strata_lock_shard(holder, 0, 1) == STRATA_OK);

    CHECK(set(t, keys[0], "new") == STRATA_LOCK_TIMEOUT); /* set: false, and a miss */
    fences++;
    CHECK(get_is(t, keys[0], NULL));
    if (!get_is(t, keys[1], keys[1])) memcpy(keys[1], keys[2], 32); /* fenced with keys[0]: 1 in 10^4 */
    CHECK(put(t, STRATA_OP_DELETE, keys[1], NULL, 0, 0, 0) == STRATA_OK); /* it was live */
    fences++;
    CHECK(get_is(t, keys[1], NULL));
    CHECK(put(t, STRATA_OP_DELETE, keys[1], NULL, 0, 0, 0) == STRATA_NOT_FOUND); /* a miss already */
    CHECK(put(t, STRATA_OP_DELETE, "fk-absent", NULL, 0, 0, 0) == STRATA_NOT_FOUND ||
          strata_shard_for(t, "fk-absent", 9) != 0);
    if (strata_shard_for(t, "counter", 7) == 0) {
        CHECK(counter(t, STRATA_OP_INCR, "counter", 1, 0, 0, &v) == STRATA_LOCK_TIMEOUT);
        CHECK(get_is(t, "counter", NULL));
        fences++;
    }
    CHECK(still_reading(t, keys + 2, n - 2) >= n - 2 - 6 * fences);
    CHECK(strata_unlock_shard(holder, 0) == STRATA_OK);

    /* The next writer of the shard clears the fences by dropping what they covered. */
    CHECK(set(t, keys[2], keys[2]) == STRATA_OK);
    CHECK(get_is(t, keys[0], NULL) && get_is(t, keys[1], NULL));
    CHECK(still_reading(t, keys + 2, n - 2) >= n - 2 - 6 * fences);
    CHECK(set(t, keys[0], "newer") == STRATA_OK && get_is(t, keys[0], "newer"));
    CHECK(set(t, keys[1], keys[1]) == STRATA_OK);
    CHECK(set(t, keys[3], keys[3]) == STRATA_OK && get_is(t, keys[3], keys[3]));
    strata_close(holder);
    strata_close(t);
}

/* A reader already copying the old value when the failed writer fences the key can't return it
 * once that writer has returned: the sink runs mid-read, between the reader's two seq checks. */
typedef struct fencing_sink {
    buf b;
    strata_table *t;
    const char *key;
    int fenced;
} fencing_sink;

static void *fencing_reserve(void *ctx, size_t len, uint64_t version)
{
    fencing_sink *f = ctx;
    if (!f->fenced) {
        f->fenced = 1;
        if (set(f->t, f->key, "new") != STRATA_LOCK_TIMEOUT) f->fenced = 2;
    }
    return buf_reserve(&f->b, len, version);
}

static void test_fence_reader_in_flight(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t, *holder;
    static fencing_sink f;
    strata_sink sink = {fencing_reserve, &f};
    t = open_table("fence2.l1", o);
    holder = open_table("fence2.l1", o);
    REQUIRE(t && holder);
    CHECK(set(t, "in-flight", "old") == STRATA_OK);
    REQUIRE(strata_lock_shard(holder, strata_shard_for(t, "in-flight", 9), 1) == STRATA_OK);
    f.t = t;
    f.key = "in-flight";
    CHECK(strata_get(t, "in-flight", 9, &sink, NULL) == STRATA_NOT_FOUND);
    CHECK(f.fenced == 1);
    CHECK(strata_unlock_shard(holder, strata_shard_for(t, "in-flight", 9)) == STRATA_OK);
    strata_close(holder);
    strata_close(t);
}

extern uint64_t strata_test_min_lock_timeout_ns;

/* The holder side of contended_write_waits: takes the shard, says so, and lets go as soon as the
 * writer is queued on the mutex (glibc sets FUTEX_WAITERS in the lock word, the mutex's first
 * int) or has given up. */
typedef struct contention {
    strata_table *holder;
    uint32_t shard;
    const volatile int *lock_word;
    int locked, writer_done;
} contention;

static void *hold_until_waited_for(void *p)
{
    contention *c = p;
    if (strata_lock_shard(c->holder, c->shard, 1) != STRATA_OK) {
        __atomic_store_n(&c->locked, -1, __ATOMIC_SEQ_CST);
        return NULL;
    }
    __atomic_store_n(&c->locked, 1, __ATOMIC_SEQ_CST);
    /* Bound: until the writer waits or returns; it returns within its lock timeout. */
    while (!(__atomic_load_n(c->lock_word, __ATOMIC_SEQ_CST) & (int)0x80000000u) &&
           !__atomic_load_n(&c->writer_done, __ATOMIC_SEQ_CST))
        sched_yield();
    strata_unlock_shard(c->holder, c->shard);
    return NULL;
}

/* lock_timeout 0 waits the minimum, not a single trylock: a write that meets a lock held
 * briefly by another thread gets it when it is let go, instead of fencing its key. The
 * minimum is raised for the test so no timing matters: the holder lets go once the writer waits. */
static void test_contended_write_waits(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t, *holder;
    strata_stats st;
    contention c;
    pthread_t thread;
    uint64_t min = strata_test_min_lock_timeout_ns;
    void *map;
    int fd;

    o.lock_timeout_ns = 0;
    strata_test_min_lock_timeout_ns = 60ull * 1000 * 1000 * 1000;
    t = open_table("contend.l1", o);
    strata_test_min_lock_timeout_ns = min;
    holder = open_table("contend.l1", o);
    REQUIRE(t && holder);
    CHECK(set(t, "k", "old") == STRATA_OK);
    fd = open(scratch_path("contend.l1"), O_RDONLY);
    REQUIRE(fd >= 0);
    map = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(map != MAP_FAILED);
    memset(&c, 0, sizeof c);
    c.holder = holder;
    c.shard = strata_shard_for(t, "k", 1);
    c.lock_word = (const volatile int *)((const char *)map + 4096 + (size_t)c.shard * 128);
    REQUIRE(pthread_create(&thread, NULL, hold_until_waited_for, &c) == 0);
    /* Bound: until the holder thread has the lock (or failed to take it). */
    while (__atomic_load_n(&c.locked, __ATOMIC_SEQ_CST) == 0) sched_yield();
    CHECK(c.locked == 1);
    CHECK(set(t, "k", "new") == STRATA_OK);
    __atomic_store_n(&c.writer_done, 1, __ATOMIC_SEQ_CST);
    pthread_join(thread, NULL);
    CHECK(get_is(t, "k", "new"));
    strata_stats_get(t, &st);
    CHECK(st.counters.lock_timeouts == 0);
    munmap(map, 8192);
    strata_close(holder);
    strata_close(t);
}

extern uint64_t strata_test_unfence_full_scans;

/* Fence n keys from keys (the shard lock held through holder), then let a write through. */
static void fence_then_write(strata_table *t, strata_table *holder, char keys[][32], int n)
{
    REQUIRE(strata_lock_shard(holder, 0, 1) == STRATA_OK);
    for (int i = 0; i < n; i++) CHECK(set(t, keys[i], "new") == STRATA_LOCK_TIMEOUT);
    CHECK(strata_unlock_shard(holder, 0) == STRATA_OK);
    CHECK(set(t, "unfence-now", "x") == STRATA_OK);
}

/* The next holder clears fences by visiting the buckets the fencers noted, not every bucket of
 * the shard (a scan per contended write made a lock held briefly even harder to get); only
 * more fenced buckets than the log holds, or a whole-shard fence (clear), send it to a scan. */
static void test_unfence_visits_fenced_buckets(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t, *holder;
    static char keys[100][32];
    uint64_t scans;
    o.shards = 1;
    t = open_table("unfence.l1", o);
    holder = open_table("unfence.l1", o);
    REQUIRE(t && holder);
    REQUIRE(keys_on_shard(t, 0, "uf", keys, 100) == 100);
    for (int i = 0; i < 100; i++) CHECK(set(t, keys[i], keys[i]) == STRATA_OK);

    scans = strata_test_unfence_full_scans;
    fence_then_write(t, holder, keys, 3);
    CHECK(strata_test_unfence_full_scans == scans);
    for (int i = 0; i < 3; i++) CHECK(get_is(t, keys[i], NULL)); /* dropped, not unmasked */
    for (int i = 0; i < 3; i++) CHECK(set(t, keys[i], keys[i]) == STRATA_OK && get_is(t, keys[i], keys[i]));
    CHECK(still_reading(t, keys, 100) >= 100 - 3 * 6);

    /* 40 keys fall in more than 10 buckets of ~3,000 (all but certainly): a full scan. */
    fence_then_write(t, holder, keys + 10, 40);
    CHECK(strata_test_unfence_full_scans == scans + 1);
    for (int i = 10; i < 50; i++) CHECK(get_is(t, keys[i], NULL));
    for (int i = 10; i < 50; i++) CHECK(set(t, keys[i], keys[i]) == STRATA_OK && get_is(t, keys[i], keys[i]));
    CHECK(set(t, "unfence-now", "y") == STRATA_OK);
    CHECK(strata_test_unfence_full_scans == scans + 1); /* nothing left to clear */

    /* A clear that can't lock the shard fences all of it: the next holder scans. */
    REQUIRE(strata_lock_shard(holder, 0, 1) == STRATA_OK);
    CHECK(strata_clear(t) == STRATA_OK);
    CHECK(strata_unlock_shard(holder, 0) == STRATA_OK);
    CHECK(set(t, keys[0], "after") == STRATA_OK && get_is(t, keys[0], "after"));
    CHECK(strata_test_unfence_full_scans == scans + 2);
    CHECK(still_reading(t, keys + 1, 99) == 0);
    for (int i = 1; i < 100; i++) CHECK(set(t, keys[i], keys[i]) == STRATA_OK);
    CHECK(still_reading(t, keys + 1, 99) == 99);
    strata_close(holder);
    strata_close(t);
}

/* The shard's count of fences waiting for a holder is 64 bits: a 32-bit one at 2^32 - 1 (4
 * billion fences, or a stray write) wrapped to 0 at the next fence, and no holder ever cleared
 * that fence: its key read as a miss for good, whatever was written to it later. */
static void test_fence_count_does_not_wrap(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t, *holder;
    const uint32_t high = 0xFFFFFFFFu; /* the low half of the count (little-endian) */
    o.shards = 1;
    t = open_table("fencewrap.l1", o);
    holder = open_table("fencewrap.l1", o);
    REQUIRE(t && holder);
    CHECK(set(t, "k", "old") == STRATA_OK);
    REQUIRE(strata_lock_shard(holder, 0, 1) == STRATA_OK);
    /* shard ctl 0: mutex, u32 active, u32 next cas, u64 drops, u64 rotations, then fenced */
    corrupt_at("fencewrap.l1", 4096 + (off_t)sizeof(pthread_mutex_t) + 24, &high, sizeof high);
    CHECK(set(t, "k", "new") == STRATA_LOCK_TIMEOUT && get_is(t, "k", NULL));
    CHECK(strata_unlock_shard(holder, 0) == STRATA_OK);
    CHECK(set(t, "k", "newer") == STRATA_OK && get_is(t, "k", "newer"));
    strata_close(holder);
    strata_close(t);
}

extern int strata_test_fence_dies_after_bit;

/* A writer killed after it set its fence bit and before it counted the fence leaves a bit no
 * holder is told of: the next write to that bucket clears it (dropping what it covers), so the
 * key written reads back. Before, the key missed for good while every set returned OK. */
static void test_a_stray_fence_bit_is_cleared_by_a_write_to_its_bucket(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t, *holder;
    o.shards = 1;
    t = open_table("strayfence.l1", o);
    holder = open_table("strayfence.l1", o);
    REQUIRE(t && holder);
    CHECK(set(t, "k", "old") == STRATA_OK);
    REQUIRE(strata_lock_shard(holder, 0, 1) == STRATA_OK);
    strata_test_fence_dies_after_bit = 1;
    CHECK(set(t, "k", "new") == STRATA_LOCK_TIMEOUT);
    strata_test_fence_dies_after_bit = 0;
    CHECK(strata_unlock_shard(holder, 0) == STRATA_OK);
    CHECK(get_is(t, "k", NULL)); /* fenced: the old value is hidden */
    CHECK(set(t, "another", "x") == STRATA_OK); /* no count: the holder clears nothing else */
    CHECK(get_is(t, "k", NULL));
    CHECK(set(t, "k", "newer") == STRATA_OK && get_is(t, "k", "newer"));
    CHECK(get_is(t, "another", "x"));
    strata_close(holder);
    strata_close(t);
}

/* Writers that fence (the minimum wait lowered to one trylock, so contention fences) race
 * holders that clear fences: once they stop, the next holder clears every fence left, so each
 * key written afterwards reads back. A fence whose note or count a holder missed would leave
 * its key a miss for good. */
typedef struct fence_racer {
    strata_table *t;
    unsigned seed;
    int ops;
} fence_racer;

static void *race_fences(void *p)
{
    fence_racer *r = p;
    char key[32];
    for (int i = 0; i < r->ops; i++) {
        snprintf(key, sizeof key, "race-%d", (int)(rand_r(&r->seed) % 2000));
        set(r->t, key, key);
    }
    return NULL;
}

static void test_fence_races_unfence(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t;
    fence_racer racers[4];
    pthread_t threads[4];
    strata_stats st;
    uint64_t min = strata_test_min_lock_timeout_ns;
    char key[32];
    int missing = 0;

    o.shards = 1;
    o.lock_timeout_ns = 0;
    strata_test_min_lock_timeout_ns = 0;
    t = open_table("fencerace.l1", o);
    strata_test_min_lock_timeout_ns = min;
    REQUIRE(t);
    for (int i = 0; i < 4; i++) {
        racers[i].t = t;
        racers[i].seed = (unsigned)i + 1;
        racers[i].ops = quick ? 5000 : 200000;
        REQUIRE(pthread_create(&threads[i], NULL, race_fences, &racers[i]) == 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
    strata_stats_get(t, &st);
    printf("        %llu of %d writes fenced\n", (unsigned long long)st.counters.lock_timeouts,
           4 * racers[0].ops);
    /* Bound: 2000 keys. Single-threaded now: every write takes the lock. */
    for (int i = 0; i < 2000; i++) {
        snprintf(key, sizeof key, "race-%d", i);
        if (set(t, key, key) != STRATA_OK || !get_is(t, key, key)) missing++;
    }
    CHECK(missing == 0);
    strata_close(t);
}

/* clear with a shard it cannot lock: that shard reads as empty at once, and stays so. */
static void test_clear_locked_shard(void)
{
    strata_options o = opts_of(2u << 20);
    strata_table *t, *holder;
    static char keys[2][50][32];
    o.shards = 2;
    t = open_table("fence3.l1", o);
    holder = open_table("fence3.l1", o);
    REQUIRE(t && holder);
    for (uint32_t s = 0; s < 2; s++) {
        REQUIRE(keys_on_shard(t, s, s ? "one" : "zero", keys[s], 50) == 50);
        for (int i = 0; i < 50; i++) CHECK(set(t, keys[s][i], keys[s][i]) == STRATA_OK);
    }
    REQUIRE(strata_lock_shard(holder, 1, 1) == STRATA_OK);
    CHECK(strata_clear(t) == STRATA_OK);
    CHECK(still_reading(t, keys[0], 50) == 0 && still_reading(t, keys[1], 50) == 0);
    CHECK(strata_unlock_shard(holder, 1) == STRATA_OK);
    CHECK(set(t, keys[1][0], "after") == STRATA_OK && get_is(t, keys[1][0], "after"));
    CHECK(still_reading(t, keys[1], 50) == 0);
    strata_close(holder);
    strata_close(t);
}

static void test_fork_child_stats(void)
{
    strata_table *t = open_table("forkstats.l1", opts_of(2u << 20));
    pid_t pid;
    int status;
    REQUIRE(t);
    CHECK(set(t, "k", "v") == STRATA_OK);
    CHECK(get_is(t, "k", "v"));
    pid = fork();
    if (pid == 0) {
        strata_stats st;
        int ok = get_is(t, "k", "v");
        strata_stats_get(t, &st);
        ok = ok && st.counters.sets == 0 && st.counters.hits == 1;
        ok = ok && set(t, "child", "c") == STRATA_OK;
        strata_close(t);
        _exit(ok ? 0 : 1);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(get_is(t, "child", "c"));
    strata_close(t);
}

/* Fill the shard's ring once over with 1000-byte values: every segment is written to. */
static int write_round(strata_table *t, const strata_geometry *g, int round)
{
    char key[32], val[1000];
    int n = (int)((uint64_t)g->segments_per_shard * g->segment_size / sizeof val) + 8;
    memset(val, 'a' + round, sizeof val);
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "age-%d-%d", round, i);
        if (put(t, STRATA_OP_SET, key, val, sizeof val, 0, 0) != STRATA_OK) return 0;
    }
    return 1;
}

/* Segment starts (table.h, LAYOUT): a segment's first use and each rotation into it store the
 * wall clock; a zero start (a file from an earlier build of layout 4), one in the future or
 * one before the file was built read as unknown (0); a clear forgets them with the fills. */
static void test_segment_starts(void)
{
    strata_options o = opts_of(1u << 20);
    strata_table *t;
    const strata_geometry *g;
    strata_segment segs[512];
    uint64_t before, after, now, zero = 0, bad;
    off_t start0;
    int used = 0, stamped = 0;
    o.shards = 1;
    o.segment_size = 4096;
    t = open_table("ages.l1", o);
    REQUIRE(t);
    g = strata_geometry_of(t);
    REQUIRE(g->segments_per_shard <= 512);
    start0 = (off_t)g->data_offset + 8; /* segment 0's started_ms */
    CHECK(strata_segments_get(t, 1, segs) == 0); /* no such shard */
    strata_segments_get(t, 0, segs);
    for (uint32_t i = 0; i < g->segments_per_shard; i++) used += segs[i].fill != 0 || segs[i].started_ms != 0;
    CHECK(used == 0);

    before = wall_ms();
    REQUIRE(write_round(t, g, 0));
    after = wall_ms();
    now = strata_segments_get(t, 0, segs);
    CHECK(now >= after);
    for (uint32_t i = 0; i < g->segments_per_shard; i++) {
        used += segs[i].fill != 0;
        stamped += segs[i].started_ms >= before && segs[i].started_ms <= after;
    }
    CHECK(used == (int)g->segments_per_shard);
    CHECK(stamped == (int)g->segments_per_shard);

    /* Forget every start, then write the ring over again: only rotations can restore them. */
    for (uint32_t i = 0; i < g->segments_per_shard; i++)
        corrupt_at("ages.l1", start0 + (off_t)i * g->segment_size, &zero, sizeof zero);
    strata_segments_get(t, 0, segs);
    for (uint32_t i = 0; i < g->segments_per_shard; i++) CHECK(segs[i].fill != 0 && segs[i].started_ms == 0);
    before = wall_ms();
    REQUIRE(write_round(t, g, 1));
    after = wall_ms();
    strata_segments_get(t, 0, segs);
    stamped = 0;
    for (uint32_t i = 0; i < g->segments_per_shard; i++)
        stamped += segs[i].started_ms >= before && segs[i].started_ms <= after;
    CHECK(stamped == (int)g->segments_per_shard);

    bad = wall_ms() + 3600 * 1000; /* an hour ahead */
    corrupt_at("ages.l1", start0, &bad, sizeof bad);
    bad = 1; /* 1970: before the file was built */
    corrupt_at("ages.l1", start0 + g->segment_size, &bad, sizeof bad);
    strata_segments_get(t, 0, segs);
    CHECK(segs[0].fill != 0 && segs[0].started_ms == 0);
    CHECK(segs[1].fill != 0 && segs[1].started_ms == 0);
    CHECK(segs[2].started_ms >= before);

    CHECK(strata_clear(t) == STRATA_OK);
    used = 0;
    strata_segments_get(t, 0, segs);
    for (uint32_t i = 0; i < g->segments_per_shard; i++) used += segs[i].fill != 0 || segs[i].started_ms != 0;
    CHECK(used == 0);
    strata_close(t);
}

/* strata_hash64_copy, which a read checks an item's value with (the copy and the hash in one
 * pass), copies exactly the bytes memcpy does and hashes as strata_hash64 does: every length
 * around the 64-byte blocks and the 16-byte tail steps, from a misaligned source, to a
 * misaligned destination, and a 25 KB value. */
static void test_hash_copy(void)
{
    static uint8_t src[25000 + 1], want[25000], got[25000 + 2];
    int mismatches = 0;

    for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)(i * 131 + (i >> 7));
    /* Bound: 301 lengths plus one long one, twice. */
    for (size_t off = 0; off < 2; off++) {
        for (size_t len = 0; len <= 301; len++) {
            size_t n = len == 301 ? 25000 : len;
            memcpy(want, src + 1, n);
            got[off + n] = 0x5A; /* the byte after the copy stays untouched */
            if (strata_hash64_copy(got + off, src + 1, n, n * 7) != strata_hash64(want, n, n * 7) ||
                memcmp(got + off, want, n) != 0 || got[off + n] != 0x5A)
                mismatches++;
        }
    }
    CHECK(mismatches == 0);
}

/* strata_hash64_copy_parts, which a write copies and checksums an item's value with (head then
 * value, one pass over the writer's bytes), stores exactly what two memcpys do and hashes as
 * strata_hash64 over the result does: every head length 0..70 (across the first block and its
 * boundary) with every value length that makes 0..300 bytes in all, and some long ones, from
 * misaligned sources to a misaligned destination; NULL head and value when their length is 0;
 * the bytes around the copy untouched. */
static void test_hash_copy_parts(void)
{
    static uint8_t src[25000 + 80], want[25000 + 80], got[25000 + 80 + 3];
    static const size_t longs[] = {1000, 4095, 4096, 4097, 25000};
    int mismatches = 0;

    for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)(i * 131 + (i >> 7) + 1);
    /* Bound: 71 head lengths by (301 + 5) totals by 2 offsets. */
    for (size_t off = 0; off < 2; off++) {
        for (size_t head_len = 0; head_len <= 70; head_len++) {
            for (size_t t = 0; t < 301 + sizeof longs / sizeof longs[0]; t++) {
                size_t total = t <= 300 ? t : longs[t - 301], value_len;
                const uint8_t *head = src + 3, *value = src + 3 + head_len + 5;
                uint64_t seed = total * 7 + head_len;

                if (total < head_len) continue;
                value_len = total - head_len;
                memcpy(want, head, head_len);
                memcpy(want + head_len, value, value_len);
                got[off] = 0xA5 ^ (uint8_t)off;
                memset(got + off + 1, 0xEE, total);
                got[off + 1 + total] = 0x5A;
                if (strata_hash64_copy_parts(got + off + 1, head_len ? head : NULL, head_len, value_len ? value : NULL,
                                             value_len, seed) != strata_hash64(want, total, seed) ||
                    memcmp(got + off + 1, want, total) != 0 || got[off] != (0xA5 ^ (uint8_t)off) ||
                    got[off + 1 + total] != 0x5A)
                    mismatches++;
            }
        }
    }
    CHECK(mismatches == 0);
}

/* Not a pass/fail test: the checksum speed, reported for the record. */
static void report_hash_speed(void)
{
    size_t len = 25000, rounds = quick ? 200 : 40000;
    char *data = malloc(len);
    uint64_t start, acc = 0, elapsed;
    if (!data) return;
    memset(data, 7, len);
    start = mono_ms();
    for (size_t i = 0; i < rounds; i++) acc ^= strata_hash64(data, len, i);
    elapsed = mono_ms() - start;
    printf("        hash: %.1f GB/s on 25 KB values (%llx)\n",
           elapsed ? (double)len * rounds / (double)elapsed / 1e6 : 0.0, (unsigned long long)(acc & 0xf));
    free(data);
}

int main(void)
{
    quick = getenv("STRATA_TEST_QUICK") != NULL;
    if (!scratch_dir_make()) return 1;
    run("set_get_delete", test_set_get_delete);
    run("expiry", test_expiry);
    run("polled_items", test_polled_items);
    run("add_cas", test_add_cas);
    run("sink_have", test_sink_have);
    run("counters", test_counters);
    run("too_large", test_too_large);
    run("head_and_value", test_head_and_value);
    run("eviction", test_eviction);
    run("keys_clear_stats", test_keys_clear_stats);
    run("geometry", test_geometry);
    run("corruption_fuzz", test_corruption_fuzz);
    run("keys_skip_damaged", test_keys_skip_damaged);
    run("geometry_changed_under_writer", test_geometry_changed_under_writer);
    run("rebuild", test_rebuild);
    run("other_boot_rebuilds", test_other_boot_rebuilds);
    run("unknown_boot_accepted", test_unknown_boot_accepted);
    run("unsafe_files", test_unsafe_files);
    run("foreign_files", test_foreign_files);
    run("unsafe_dirs", test_unsafe_dirs);
    run("multiprocess", test_multiprocess);
    run("owner_died", test_owner_died);
    run("stopped_holder", test_stopped_holder);
    run("stopped_opener", test_stopped_opener);
    run("replaced_while_opening", test_replaced_while_opening);
    run("build_interrupted", test_build_interrupted);
    run("fenced_write", test_fenced_write);
    run("fence_reader_in_flight", test_fence_reader_in_flight);
    run("clear_locked_shard", test_clear_locked_shard);
    run("unfence_visits_fenced_buckets", test_unfence_visits_fenced_buckets);
    run("fence_count_does_not_wrap", test_fence_count_does_not_wrap);
    run("a_stray_fence_bit_is_cleared_by_a_write_to_its_bucket", test_a_stray_fence_bit_is_cleared_by_a_write_to_its_bucket);
    run("contended_write_waits", test_contended_write_waits);
    run("fence_races_unfence", test_fence_races_unfence);
    run("fork_child_stats", test_fork_child_stats);
    run("segment_starts", test_segment_starts);
    run("hash_copy", test_hash_copy);
    run("hash_copy_parts", test_hash_copy_parts);
    report_hash_speed();
    scratch_dir_remove();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
