/*
 * byte_buffer_test.c - tests of ext/strata/byte_buffer.c, the memcached client's socket buffers.
 * Run through the Makefile (test, asan, valgrind, check).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdlib.h>
#include <string.h>

#include "../../ext/strata/byte_buffer.h"
#include "harness.h"

static int append_str(strata_bytes *b, const char *s) { return strata_bytes_append(b, s, strlen(s)); }

static int held_equals(const strata_bytes *b, const char *s)
{
    size_t n = strlen(s);
    return strata_bytes_held(b) == n && (n == 0 || memcmp(strata_bytes_head(b), s, n) == 0);
}

static void test_append_consume(void)
{
    strata_bytes b = {0};
    CHECK(strata_bytes_held(&b) == 0);
    REQUIRE(append_str(&b, "VA 2\r\nhi\r\n") == 0);
    CHECK(held_equals(&b, "VA 2\r\nhi\r\n"));
    strata_bytes_consume(&b, 6);
    CHECK(held_equals(&b, "hi\r\n"));
    strata_bytes_consume(&b, 4);
    CHECK(strata_bytes_held(&b) == 0);
    CHECK(b.start == 0 && b.end == 0); /* emptied: restarts at the front */
    CHECK(strata_bytes_append(&b, "", 0) == 0);
    REQUIRE(append_str(&b, "MN\r\n") == 0);
    strata_bytes_consume(&b, 100); /* more than held: drops what there is, never past end */
    CHECK(strata_bytes_held(&b) == 0 && b.start == 0 && b.end == 0);
    strata_bytes_free(&b);
    CHECK(b.data == NULL && b.cap == 0);
}

static void test_find_crlf(void)
{
    strata_bytes b = {0};
    CHECK(strata_bytes_find_crlf(&b, 0) == -1);
    REQUIRE(append_str(&b, "HD\r") == 0);
    CHECK(strata_bytes_find_crlf(&b, 0) == -1); /* a "\r" alone ends nothing */
    REQUIRE(append_str(&b, "\nEN\r\n") == 0);
    CHECK(strata_bytes_find_crlf(&b, 0) == 2);
    CHECK(strata_bytes_find_crlf(&b, 2) == 2);
    CHECK(strata_bytes_find_crlf(&b, 3) == 6);
    CHECK(strata_bytes_find_crlf(&b, 7) == -1);
    CHECK(strata_bytes_find_crlf(&b, 100) == -1);
    strata_bytes_consume(&b, 4);
    CHECK(strata_bytes_find_crlf(&b, 0) == 2); /* offsets count from the first held byte */
    strata_bytes_free(&b);
}

/* Held bytes survive compaction and growth in order, whatever the consumed front. */
static void test_reserve_keeps_held_bytes(void)
{
    strata_bytes b = {0};
    char expect[20000];
    size_t n = 0;
    for (int round = 0; round < 2000; round++) {
        char piece[17];
        int len = 1 + round % 16;
        for (int i = 0; i < len; i++) piece[i] = (char)('a' + (round + i) % 26);
        REQUIRE(strata_bytes_append(&b, piece, (size_t)len) == 0);
        REQUIRE(n + (size_t)len <= sizeof expect);
        memcpy(expect + n, piece, (size_t)len);
        n += (size_t)len;
        if (round % 3 == 0 && n > 10) { /* consume some from the front */
            strata_bytes_consume(&b, 7);
            memmove(expect, expect + 7, n - 7);
            n -= 7;
        }
        REQUIRE(strata_bytes_held(&b) == n);
        REQUIRE(memcmp(strata_bytes_head(&b), expect, n) == 0);
        REQUIRE(b.start <= b.end && b.end <= b.cap);
    }
    REQUIRE(strata_bytes_reserve(&b, 1 << 20) == 0);
    CHECK(b.cap - b.end >= (size_t)1 << 20);
    CHECK(strata_bytes_held(&b) == n && memcmp(strata_bytes_head(&b), expect, n) == 0);
    strata_bytes_free(&b);
}

static void test_reserve_compacts_before_growing(void)
{
    strata_bytes b = {0};
    REQUIRE(strata_bytes_reserve(&b, 64) == 0);
    size_t cap = b.cap;
    char fill[64];
    memset(fill, 'x', sizeof fill);
    REQUIRE(strata_bytes_append(&b, fill, cap) == 0);
    strata_bytes_consume(&b, cap - 8);
    REQUIRE(strata_bytes_reserve(&b, cap - 8) == 0);
    CHECK(b.cap == cap); /* moved 8 bytes to the front instead of growing */
    CHECK(b.start == 0 && strata_bytes_held(&b) == 8);
    strata_bytes_free(&b);
}

static void test_reserve_refuses_impossible_sizes(void)
{
    strata_bytes b = {0};
    REQUIRE(append_str(&b, "keep") == 0);
    CHECK(strata_bytes_reserve(&b, (size_t)-1) == -1);
    CHECK(strata_bytes_append(&b, "x", (size_t)-1 / 2) == -1);
    CHECK(held_equals(&b, "keep")); /* unchanged */
    strata_bytes_free(&b);
}

static void test_clear_gives_back_memory(void)
{
    strata_bytes b = {0};
    REQUIRE(strata_bytes_reserve(&b, 1 << 20) == 0);
    REQUIRE(append_str(&b, "big value") == 0);
    strata_bytes_clear(&b, 4096);
    CHECK(strata_bytes_held(&b) == 0 && b.cap == 4096);
    REQUIRE(append_str(&b, "reused") == 0);
    CHECK(held_equals(&b, "reused"));
    strata_bytes_clear(&b, 1 << 20); /* under keep: nothing given back */
    CHECK(b.cap == 4096);
    strata_bytes_clear(&b, 0);
    CHECK(b.data == NULL && b.cap == 0);
    strata_bytes_free(&b);
}

int main(void)
{
    run("append_consume", test_append_consume);
    run("find_crlf", test_find_crlf);
    run("reserve_keeps_held_bytes", test_reserve_keeps_held_bytes);
    run("reserve_compacts_before_growing", test_reserve_compacts_before_growing);
    run("reserve_refuses_impossible_sizes", test_reserve_refuses_impossible_sizes);
    run("clear_gives_back_memory", test_clear_gives_back_memory);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
