/*
 * stamp_check_test.c - tests of the stamp check (stamp_check.h) in C, without Ruby: table.c,
 * lock.c and stamp_check.c are linked directly. Run through the Makefile (test, asan,
 * valgrind, check). STRATA_TEST_QUICK=1 shortens the concurrent test (used under valgrind).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../ext/strata/stamp_check.h"
#include "../../ext/strata/table.h"
#include "harness.h"

static int quick;
static strata_table *table;
/* The version keys' format, as Strata::Dependencies makes them (VERSION_PREFIX). */
static strata_tag_keys keys;
static char path[128];

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Stores bytes as tag id's version under the keys with_keys makes; len other than 8 plants a
 * malformed one. */
static strata_status put_version_under(const strata_tag_keys *with_keys, uint64_t id, const void *bytes, size_t len)
{
    char key[STRATA_TAG_KEY_MAX];
    size_t key_len;
    strata_write_req r;
    key_len = strata_tag_key(with_keys, id, key);
    memset(&r, 0, sizeof r);
    r.op = STRATA_OP_SET;
    r.key = key;
    r.key_len = key_len;
    r.value = bytes;
    r.value_len = len;
    return strata_write(table, &r, 1);
}

static strata_status put_version_bytes(uint64_t id, const void *bytes, size_t len)
{
    return put_version_under(&keys, id, bytes, len);
}

static strata_status put_version(uint64_t id, uint64_t version)
{
    unsigned char bytes[8];
    put_le64(bytes, version);
    return put_version_bytes(id, bytes, sizeof bytes);
}

static strata_status drop_version(uint64_t id)
{
    char key[STRATA_TAG_KEY_MAX];
    size_t key_len;
    strata_write_req r;
    key_len = strata_tag_key(&keys, id, key);
    memset(&r, 0, sizeof r);
    r.op = STRATA_OP_DELETE;
    r.key = key;
    r.key_len = key_len;
    return strata_write(table, &r, 1);
}

typedef struct version_buf {
    unsigned char bytes[8];
} version_buf;

static void *version_reserve_for_test(void *ctx, size_t len, uint64_t version)
{
    (void)version;
    return len == sizeof(((version_buf *)ctx)->bytes) ? ((version_buf *)ctx)->bytes : NULL;
}

/* An entry as lib/strata/entry.rb lays it out: version "v1", count stamps from ids and
 * versions, payload "payload". Returns its length. */
static size_t make_entry(unsigned char *out, const uint64_t *ids, const uint64_t *versions, size_t count)
{
    size_t at = 0;
    out[at++] = 0xE1;
    out[at++] = count ? 0xC0 : 0x40; /* VERSIONED, STAMPED */
    put_le64(out + at, 0);
    at += 8;
    out[at++] = 2;
    out[at++] = 0;
    memcpy(out + at, "v1", 2);
    at += 2;
    out[at++] = (unsigned char)(count & 0xff);
    out[at++] = (unsigned char)(count >> 8);
    for (size_t i = 0; i < count; i++) {
        put_le64(out + at, ids[i]);
        put_le64(out + at + 8, versions[i]);
        at += 16;
    }
    memcpy(out + at, "payload", 7);
    return at + 7;
}

/* The answer of strata_entry_stamps_check with the key memo the tests share, which must be the
 * answer without one. */
static strata_key_memo memo;

static strata_stamps entry_check(const void *bytes, size_t len)
{
    strata_stamps plain = strata_entry_stamps_check(table, bytes, len, &keys, NULL);
    strata_stamps memoized = strata_entry_stamps_check(table, bytes, len, &keys, &memo);
    CHECK(plain == memoized);
    return memoized;
}

static void test_tag_key_format(void)
{
    char key[STRATA_TAG_KEY_MAX];
    size_t key_len;
    strata_tag_keys none, other;
    char too_long[STRATA_TAG_PREFIX_MAX + 1];

    key_len = strata_tag_key(&keys, 0x3fedcba987654321ULL, key);
    /* As Ruby's format("\0strata:tag:%016x", id). */
    CHECK(key_len == 28);
    CHECK(memcmp(key, "\0strata:tag:3fedcba987654321", key_len) == 0);
    key_len = strata_tag_key(&keys, 42, key);
    CHECK(memcmp(key, "\0strata:tag:000000000000002a", key_len) == 0);
    memset(&none, 0, sizeof none);
    CHECK(strata_tag_key(&none, 42, key) == 0);
    memset(too_long, 'x', sizeof too_long);
    CHECK(strata_tag_keys_set(&none, too_long, sizeof too_long) == -1);
    CHECK(strata_tag_keys_set(&none, "", 0) == -1);
    CHECK(none.prefix_len == 0);
    CHECK(strata_tag_keys_set(&other, "\0v:", 3) == 0);
    CHECK(strata_tag_key(&other, 42, key) == 19);
    CHECK(memcmp(key, "\0v:000000000000002a", 19) == 0);
}

/* The keys are the caller's: with no prefix given nothing is settled, and with another prefix
 * the versions are read under that prefix's keys. */
static void test_versions_are_read_under_the_keys_given(void)
{
    unsigned char entry[256];
    uint64_t id = 61, version = 7;
    strata_tag_keys none, other;
    size_t len;
    unsigned char bytes[8];

    REQUIRE(put_version(id, version) == STRATA_OK);
    len = make_entry(entry, &id, &version, 1);
    memset(&none, 0, sizeof none);
    CHECK(strata_entry_stamps_check(table, entry, len, &none, NULL) == STRATA_STAMPS_UNKNOWN);
    REQUIRE(strata_tag_keys_set(&other, "\0v:", 3) == 0);
    CHECK(strata_entry_stamps_check(table, entry, len, &other, NULL) == STRATA_STAMPS_UNKNOWN);
    put_le64(bytes, version + 1);
    REQUIRE(put_version_under(&other, id, bytes, sizeof bytes) == STRATA_OK);
    CHECK(strata_entry_stamps_check(table, entry, len, &other, NULL) == STRATA_STAMPS_STALE);
    CHECK(entry_check(entry, len) == STRATA_STAMPS_CURRENT);
}

static void test_one_stamp(void)
{
    unsigned char entry[256];
    uint64_t id = 11, version = 0x123456789abcdefULL, old = 5;
    size_t len;

    REQUIRE(put_version(id, version) == STRATA_OK);
    len = make_entry(entry, &id, &version, 1);
    CHECK(entry_check(entry, len) == STRATA_STAMPS_CURRENT);
    len = make_entry(entry, &id, &old, 1);
    CHECK(entry_check(entry, len) == STRATA_STAMPS_STALE);
}

static void test_many_stamps(void)
{
    enum { COUNT = 300 };
    static unsigned char entry[64 + COUNT * 16];
    uint64_t ids[COUNT], versions[COUNT];
    size_t len;

    for (int i = 0; i < COUNT; i++) {
        ids[i] = 1000 + (uint64_t)i;
        versions[i] = 7 * (uint64_t)i + 1;
        REQUIRE(put_version(ids[i], versions[i]) == STRATA_OK);
    }
    len = make_entry(entry, ids, versions, COUNT);
    CHECK(entry_check(entry, len) == STRATA_STAMPS_CURRENT);
    /* Any one stale stamp, first, middle or last, makes the whole entry stale. */
    for (int at = 0; at < COUNT; at += COUNT / 3 - 1) {
        versions[at]++;
        len = make_entry(entry, ids, versions, COUNT);
        CHECK(entry_check(entry, len) == STRATA_STAMPS_STALE);
        versions[at]--;
    }
    versions[COUNT - 1]++;
    len = make_entry(entry, ids, versions, COUNT);
    CHECK(entry_check(entry, len) == STRATA_STAMPS_STALE);
}

static void test_missing_version_is_unknown(void)
{
    unsigned char entry[256];
    uint64_t ids[3] = {21, 22, 23}, versions[3] = {1, 2, 3};
    size_t len;

    for (int i = 0; i < 3; i++) REQUIRE(put_version(ids[i], versions[i]) == STRATA_OK);
    REQUIRE(drop_version(22) == STRATA_OK);
    len = make_entry(entry, ids, versions, 3);
    CHECK(entry_check(entry, len) == STRATA_STAMPS_UNKNOWN);
    /* A stale stamp after the missing one still settles it. */
    versions[2] = 4;
    len = make_entry(entry, ids, versions, 3);
    CHECK(entry_check(entry, len) == STRATA_STAMPS_STALE);
    /* An expired version is missing too. */
    {
        char key[STRATA_TAG_KEY_MAX];
        size_t key_len;
        unsigned char bytes[8];
        strata_write_req r;
        uint64_t id = 24, version = 9;
        key_len = strata_tag_key(&keys, id, key);
        put_le64(bytes, version);
        memset(&r, 0, sizeof r);
        r.op = STRATA_OP_SET;
        r.key = key;
        r.key_len = key_len;
        r.value = bytes;
        r.value_len = sizeof bytes;
        r.ttl_ms = 1;
        REQUIRE(strata_write(table, &r, 1) == STRATA_OK);
        usleep(5000);
        len = make_entry(entry, &id, &version, 1);
        CHECK(entry_check(entry, len) == STRATA_STAMPS_UNKNOWN);
    }
}

/* strata_get_at reads the clock once, for the first item with an expiry, and judges every
 * later lookup by that time. */
static void test_get_at_reads_the_clock_once(void)
{
    unsigned char bytes[8];
    char key[STRATA_TAG_KEY_MAX];
    size_t key_len;
    version_buf held;
    strata_sink sink = {version_reserve_for_test, &held};
    strata_write_req r;
    uint64_t now = 0;

    put_le64(bytes, 1);
    REQUIRE(put_version(71, 1) == STRATA_OK); /* no expiry: the clock is not read */
    key_len = strata_tag_key(&keys, 71, key);
    CHECK(strata_get_at(table, key, key_len, &sink, NULL, &now) == STRATA_OK);
    CHECK(now == 0);
    key_len = strata_tag_key(&keys, 72, key);
    memset(&r, 0, sizeof r);
    r.op = STRATA_OP_SET;
    r.key = key;
    r.key_len = key_len;
    r.value = bytes;
    r.value_len = sizeof bytes;
    r.ttl_ms = 60000;
    REQUIRE(strata_write(table, &r, 1) == STRATA_OK);
    CHECK(strata_get_at(table, key, key_len, &sink, NULL, &now) == STRATA_OK);
    CHECK(now != 0);
    now += 120000; /* a later time, as if the clock had been read then: expired */
    CHECK(strata_get_at(table, key, key_len, &sink, NULL, &now) == STRATA_NOT_FOUND);
    now = 0;
    CHECK(strata_get_at(table, key, key_len, &sink, NULL, &now) == STRATA_OK);
}

static void test_malformed_version_is_unknown(void)
{
    unsigned char entry[256];
    uint64_t id = 31, version = 0x0102030405060708ULL;
    unsigned char bytes[9];
    size_t len;

    put_le64(bytes, version);
    bytes[8] = 0;
    len = make_entry(entry, &id, &version, 1);
    REQUIRE(put_version_bytes(id, bytes, 9) == STRATA_OK); /* its 8 bytes and one more */
    CHECK(entry_check(entry, len) == STRATA_STAMPS_UNKNOWN);
    REQUIRE(put_version_bytes(id, bytes, 7) == STRATA_OK);
    CHECK(entry_check(entry, len) == STRATA_STAMPS_UNKNOWN);
    REQUIRE(put_version_bytes(id, bytes, 0) == STRATA_OK);
    CHECK(entry_check(entry, len) == STRATA_STAMPS_UNKNOWN);
    REQUIRE(put_version(id, version) == STRATA_OK);
    CHECK(entry_check(entry, len) == STRATA_STAMPS_CURRENT);
}

/* Every truncation and every bad header of a valid entry is unknown, never read past len (ASan
 * and valgrind check that: each truncated copy is its own allocation). */
static void test_malformed_entry_is_unknown(void)
{
    unsigned char entry[256];
    uint64_t ids[2] = {41, 42}, versions[2] = {1, 2};
    size_t len, stamps_end = 16 + 2 * 16; /* header with "v1", then the stamps */

    for (int i = 0; i < 2; i++) REQUIRE(put_version(ids[i], versions[i]) == STRATA_OK);
    len = make_entry(entry, ids, versions, 2);
    for (size_t cut = 0; cut < stamps_end; cut++) {
        unsigned char *copy = malloc(cut ? cut : 1);
        REQUIRE(copy);
        memcpy(copy, entry, cut);
        CHECK(entry_check(copy, cut) == STRATA_STAMPS_UNKNOWN);
        free(copy);
    }
    CHECK(entry_check(entry, stamps_end) == STRATA_STAMPS_CURRENT); /* empty payload */
    entry[0] = 0xE2;
    CHECK(entry_check(entry, len) == STRATA_STAMPS_UNKNOWN);
    entry[0] = 0xE1;
    entry[10] = 0xff; /* the version runs past the end */
    CHECK(entry_check(entry, len) == STRATA_STAMPS_UNKNOWN);
    entry[10] = 2;
    entry[14] = 0xff; /* the stamps run past the end */
    CHECK(entry_check(entry, len) == STRATA_STAMPS_UNKNOWN);
    entry[14] = 0; /* no stamps */
    entry[15] = 0;
    CHECK(entry_check(entry, len) == STRATA_STAMPS_UNKNOWN);
    CHECK(strata_stamps_check(table, entry, 0, &keys, NULL) == STRATA_STAMPS_CURRENT);
}

/* strata_entry_stamped reads the marker and the flags byte, within len. */
static void test_entry_stamped(void)
{
    unsigned char entry[256];
    uint64_t ids[1] = {41}, versions[1] = {1};
    size_t len = make_entry(entry, ids, versions, 1);

    CHECK(strata_entry_stamped(entry, len));
    CHECK(strata_entry_stamped(entry, 2));
    CHECK(!strata_entry_stamped(entry, 1));
    CHECK(!strata_entry_stamped(entry, 0));
    len = make_entry(entry, ids, versions, 0);
    CHECK(!strata_entry_stamped(entry, len));
    entry[1] = 0x80;
    entry[0] = '4'; /* a counter's first digit */
    CHECK(!strata_entry_stamped(entry, len));
}

/* An entry holding a bare String, as strata_entry_plain takes it: kind and flags byte, no
 * version, no expiry, stamps (count) and the payload "plain". */
static size_t make_plain(unsigned char *out, unsigned flags, size_t count)
{
    size_t at = 0;
    out[at++] = 0xE1;
    out[at++] = (unsigned char)flags;
    put_le64(out + at, 0);
    at += 8;
    out[at++] = 0;
    out[at++] = 0;
    out[at++] = (unsigned char)(count & 0xff);
    out[at++] = (unsigned char)(count >> 8);
    for (size_t i = 0; i < count; i++) {
        put_le64(out + at, 41 + i);
        put_le64(out + at + 8, 1);
        at += 16;
    }
    memcpy(out + at, "plain", 5);
    return at + 5;
}

/* strata_entry_plain takes the three String kinds, with and without stamps, and nothing else:
 * no other flag, no expiry, no version, no put-back, every length within len. */
static void test_entry_plain(void)
{
    unsigned char entry[256];
    size_t len, at = 0;
    int stamped = -1;

    len = make_plain(entry, STRATA_ENTRY_UTF8, 0);
    CHECK(strata_entry_plain(entry, len, &at, &stamped) == STRATA_ENTRY_UTF8);
    CHECK(at == 14 && stamped == 0);
    CHECK(strata_entry_plain(entry, 14, &at, &stamped) == STRATA_ENTRY_UTF8); /* empty String */
    CHECK(strata_entry_plain(entry, 13, &at, &stamped) == 0);
    len = make_plain(entry, STRATA_ENTRY_BINARY | 0x80, 2);
    CHECK(strata_entry_plain(entry, len, &at, &stamped) == STRATA_ENTRY_BINARY);
    CHECK(at == 14 + 32 && stamped == 1);
    for (size_t cut = 0; cut < 14 + 32; cut++) CHECK(strata_entry_plain(entry, cut, &at, &stamped) == 0);
    len = make_plain(entry, STRATA_ENTRY_ASCII, 0);
    CHECK(strata_entry_plain(entry, len, &at, &stamped) == STRATA_ENTRY_ASCII);

    len = make_plain(entry, STRATA_ENTRY_UTF8 | 0x80, 0); /* STAMPED without stamps */
    CHECK(strata_entry_plain(entry, len, &at, &stamped) == 0);
    len = make_plain(entry, STRATA_ENTRY_UTF8, 1); /* stamps without STAMPED */
    CHECK(strata_entry_plain(entry, len, &at, &stamped) == 0);
    for (unsigned flags = 0; flags < 256; flags++) {
        unsigned kind = flags & 0x7F;
        int plain = kind == STRATA_ENTRY_BINARY || kind == STRATA_ENTRY_UTF8 || kind == STRATA_ENTRY_ASCII;
        len = make_plain(entry, flags, (flags & 0x80) ? 1 : 0);
        CHECK((strata_entry_plain(entry, len, &at, &stamped) != 0) == plain);
    }
    len = make_plain(entry, STRATA_ENTRY_UTF8, 0);
    entry[9] = 1; /* an expiry */
    CHECK(strata_entry_plain(entry, len, &at, &stamped) == 0);
    entry[9] = 0;
    entry[10] = 1; /* a version */
    CHECK(strata_entry_plain(entry, len, &at, &stamped) == 0);
    entry[10] = 0;
    entry[0] = 0xE3; /* put back for race_condition_ttl: the decoder's */
    CHECK(strata_entry_plain(entry, len, &at, &stamped) == 0);
    entry[0] = '4';
    CHECK(strata_entry_plain(entry, len, &at, &stamped) == 0);
}

/* The memo keeps one hash per slot: ids that share a slot take turns, and a hash that is not
 * the key's (a memo kept for another table) finds nothing, so the stamp is never passed. */
static void test_key_memo(void)
{
    unsigned char entry[256];
    uint64_t ids[2] = {7, 7 + STRATA_KEY_MEMO_SLOTS}, versions[2] = {1, 2};
    unsigned slot = 7 % STRATA_KEY_MEMO_SLOTS;
    strata_key_memo own;
    size_t len;

    memset(&own, 0, sizeof own);
    for (int i = 0; i < 2; i++) REQUIRE(put_version(ids[i], versions[i]) == STRATA_OK);
    len = make_entry(entry, ids, versions, 2);
    CHECK(strata_entry_stamps_check(table, entry, len, &keys, &own) == STRATA_STAMPS_CURRENT);
    CHECK(own.known == (uint64_t)1 << slot);
    CHECK(own.id[slot] == ids[1]);
    CHECK(strata_entry_stamps_check(table, entry, len, &keys, &own) == STRATA_STAMPS_CURRENT);
    len = make_entry(entry, ids, versions, 1);
    own.hash[slot] ^= 1; /* ids[0] comes back and replaces it */
    CHECK(strata_entry_stamps_check(table, entry, len, &keys, &own) == STRATA_STAMPS_CURRENT);
    CHECK(own.id[slot] == ids[0]);
    own.hash[slot] ^= 1;
    CHECK(strata_entry_stamps_check(table, entry, len, &keys, &own) == STRATA_STAMPS_UNKNOWN);
    versions[0] = 9;
    len = make_entry(entry, ids, versions, 1);
    CHECK(strata_entry_stamps_check(table, entry, len, &keys, &own) == STRATA_STAMPS_UNKNOWN); /* not stale */
}

/* A version whose bump could not take its shard lock is fenced: it reads as missing, so the
 * check is unknown (the caller reads the lower tiers), never current with the old version. */
static void test_fenced_version_is_unknown(void)
{
    unsigned char entry[256];
    uint64_t id = 51, version = 3;
    char key[STRATA_TAG_KEY_MAX];
    size_t key_len;
    strata_options o;
    strata_table *holder = NULL;
    const char *reason = NULL;
    int err = 0;
    uint32_t shard;
    size_t len;

    memset(&o, 0, sizeof o);
    o.size = 4u << 20;
    o.lock_timeout_ns = 10u * 1000u * 1000u;
    REQUIRE(strata_open(path, &o, &holder, &reason, &err) == STRATA_OK);
    REQUIRE(put_version(id, version) == STRATA_OK);
    len = make_entry(entry, &id, &version, 1);
    CHECK(entry_check(entry, len) == STRATA_STAMPS_CURRENT);
    key_len = strata_tag_key(&keys, id, key);
    shard = strata_shard_for(table, key, key_len);
    REQUIRE(strata_lock_shard(holder, shard, 1) == STRATA_OK);
    CHECK(put_version(id, version + 1) == STRATA_LOCK_TIMEOUT); /* the bump fenced the key */
    CHECK(entry_check(entry, len) == STRATA_STAMPS_UNKNOWN);
    CHECK(strata_unlock_shard(holder, shard) == STRATA_OK);
    strata_close(holder);
    /* The next writer of the shard drops the old version with the fence. */
    REQUIRE(put_version(id, version + 1) == STRATA_OK);
    CHECK(entry_check(entry, len) == STRATA_STAMPS_STALE);
}

/* A writer bumps one tag's version 1, 2, 3, ... and publishes each number once its write has
 * returned; a reader checks, with another tag's current stamp beside it, the version just
 * before the published one, superseded before the check began. None may pass. */
typedef struct bumper {
    uint64_t id;
    uint64_t last;      /* the writer's last version */
    uint64_t published; /* atomic: the highest version whose write has returned */
    int failed;
} bumper;

static void *bump_loop(void *p)
{
    bumper *b = p;
    for (uint64_t v = 1; v <= b->last; v++) {
        if (put_version(b->id, v) != STRATA_OK) {
            b->failed = 1;
            break;
        }
        __atomic_store_n(&b->published, v, __ATOMIC_SEQ_CST);
    }
    __atomic_store_n(&b->published, b->last, __ATOMIC_SEQ_CST); /* ends the reader after a failure */
    return NULL;
}

static void test_concurrent_bump(void)
{
    unsigned char entry[256];
    bumper b = {61, quick ? 2000 : 200000, 0, 0};
    uint64_t ids[2] = {62, 61}, versions[2] = {1, 0};
    pthread_t th;
    long stale_passed = 0, checks = 0;
    size_t len;

    REQUIRE(put_version(62, 1) == STRATA_OK);
    REQUIRE(put_version(61, 0) == STRATA_OK);
    REQUIRE(pthread_create(&th, NULL, bump_loop, &b) == 0);
    /* Bound: ends when the writer has published its last version. */
    for (;;) {
        uint64_t seen = __atomic_load_n(&b.published, __ATOMIC_SEQ_CST);
        if (seen == 0) continue;
        versions[1] = seen - 1;
        len = make_entry(entry, ids, versions, 2);
        /* Not entry_check: a bump between its two calls may rightly part their answers. Each
         * call, memo or not, must refuse the stale stamp on its own. */
        if (strata_entry_stamps_check(table, entry, len, &keys, NULL) == STRATA_STAMPS_CURRENT) stale_passed++;
        if (strata_entry_stamps_check(table, entry, len, &keys, &memo) == STRATA_STAMPS_CURRENT) stale_passed++;
        checks++;
        if (seen == b.last) break;
    }
    pthread_join(th, NULL);
    CHECK(!b.failed);
    CHECK(stale_passed == 0);
    CHECK(checks > 0);
    /* Once the bumps are over the newest stamp is current. The other tag's version may have
     * been evicted by the bumps' writes meanwhile (CLOCK): it is written again first. */
    REQUIRE(put_version(62, 1) == STRATA_OK);
    versions[1] = b.last;
    len = make_entry(entry, ids, versions, 2);
    CHECK(entry_check(entry, len) == STRATA_STAMPS_CURRENT);
}

int main(void)
{
    strata_options o;
    const char *reason = NULL;
    int err = 0;

    quick = getenv("STRATA_TEST_QUICK") != NULL;
    if (!scratch_dir_make()) return 1;
    snprintf(path, sizeof path, "%s", scratch_path("stamps.l1"));
    memset(&o, 0, sizeof o);
    o.size = 4u << 20;
    o.lock_timeout_ns = 10u * 1000u * 1000u;
    if (strata_open(path, &o, &table, &reason, &err) != STRATA_OK) {
        fprintf(stderr, "open %s failed\n", path);
        return 1;
    }
    if (strata_tag_keys_set(&keys, "\0strata:tag:", 12) != 0) return 1;
    run("tag_key_format", test_tag_key_format);
    run("versions_are_read_under_the_keys_given", test_versions_are_read_under_the_keys_given);
    run("one_stamp", test_one_stamp);
    run("many_stamps", test_many_stamps);
    run("missing_version_is_unknown", test_missing_version_is_unknown);
    run("get_at_reads_the_clock_once", test_get_at_reads_the_clock_once);
    run("malformed_version_is_unknown", test_malformed_version_is_unknown);
    run("malformed_entry_is_unknown", test_malformed_entry_is_unknown);
    run("entry_stamped", test_entry_stamped);
    run("entry_plain", test_entry_plain);
    run("key_memo", test_key_memo);
    run("fenced_version_is_unknown", test_fenced_version_is_unknown);
    run("concurrent_bump", test_concurrent_bump);
    strata_close(table);
    unlink(path);
    rmdir(scratch_dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
