/*
 * hash.h - the one hash family Strata uses for key hashing and item checksums.
 *
 * A multiply-fold hash: 64x64->128-bit products folded to 64 bits. Inputs over 64 bytes run four
 * independent lanes over 64-byte blocks (one multiply per 16 bytes per lane), so long values hash
 * at memory speed; short keys take one or two multiplies. The seed is per file (random at
 * creation), so two tables hash differently and crafted keys can't be precomputed offline.
 *
 * Not a cryptographic hash. It detects torn and corrupted reads (random damage passes with
 * probability about 2^-32 for the 32-bit checksum) and spreads keys over shards and buckets.
 * Words are loaded little- or big-endian as the CPU does; the file fingerprint records the byte
 * order, so a file is never shared between machines that would disagree.
 */
#ifndef STRATA_HASH_H
#define STRATA_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The helpers below are the inner steps of the loops: always inlined, so that a caller grown by
 * the prefetch and copy variants does not get them as calls (the lanes would live in memory). */
#define STRATA_HASH_STEP static inline __attribute__((always_inline))

/* Odd constants from the hex digits of pi; any odd, dense bit patterns would do. */
#define STRATA_HK0 0x243F6A8885A308D3ULL
#define STRATA_HK1 0x13198A2E03707345ULL
#define STRATA_HK2 0xA4093822299F31D1ULL
#define STRATA_HK3 0x082EFA98EC4E6C89ULL
#define STRATA_HK4 0x452821E638D01377ULL
#define STRATA_HK5 0xBE5466CF34E90C6DULL
#define STRATA_HK6 0xC0AC29B7C97C50DDULL

STRATA_HASH_STEP uint64_t strata_hash_fold(uint64_t a, uint64_t b)
{
    unsigned __int128 r = (unsigned __int128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

STRATA_HASH_STEP uint64_t strata_hash_load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

STRATA_HASH_STEP uint64_t strata_hash_load32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The four lanes' start from h. */
#define STRATA_HASH_LANES_INIT(h) {(h), (h) ^ STRATA_HK2, (h) ^ STRATA_HK3, (h) ^ STRATA_HK4}

/*
 * Software prefetch for the long loops (inputs over 64 bytes): each 64-byte block iteration
 * hints the line STRATA_HASH_PREFETCH bytes ahead, and the loops that read a value first hint
 * the lines up to that distance (strata_hash_prefetch_start), so a value that is not in cache (a
 * hit on a large working set, a compaction, a write's destination in the table's log) streams in
 * ahead of the multiplies instead of one miss at a time.
 *
 * 2048 bytes (32 lines), by measurement on the project's 2-core VM (Intel Xeon; 25 KB values, a
 * 512 MB region; medians of 41-81 interleaved runs of 500 calls): a read's copy and hash took
 * 4.7-5.6 us with no hints, 4.7 with hints 512 bytes ahead, 4.1-4.2 at 1024, 3.3-3.8 at 2048, no
 * better at 3072 or 4096 (8192 was worse in an earlier probe), and 0.1-0.3 us less again with the
 * start hints; hints every other line were worse. The write's one-pass copy
 * (strata_hash64_copy_parts) took 5.4-5.8 us with no hints on its destination, 4.0 at 1024 and
 * 3.2-3.4 at 2048 to 4096, where memcpy then strata_hash64 took 4.6-5.3; start hints did nothing
 * there. On a value already in cache the hints cost about 6% (25 KB: a read 1.36 -> 1.45 us, a
 * hash 1.10 -> 1.16).
 *
 * Hints never fault: the address up to STRATA_HASH_PREFETCH bytes past the end of the input is
 * formed as an integer and only hinted, never loaded, so an input at the end of a mapping is
 * fine, and a line of the table's file hinted for writing is only brought into this core's
 * cache, never changed. (x86-64 builds without -mprfchw compile a write hint to prefetcht0,
 * which brings the line in all the same.)
 */
#define STRATA_HASH_PREFETCH 2048

/* Hint the line STRATA_HASH_PREFETCH bytes past p for reading (rw 0) or writing (rw 1). */
#define STRATA_HASH_PREFETCH_AHEAD(p, rw) \
    __builtin_prefetch((const void *)((uintptr_t)(p) + STRATA_HASH_PREFETCH), (rw))

/* Hint the lines of [p + 64, p + min(len, STRATA_HASH_PREFETCH)), the ones the loop's own hints
 * do not reach; the first is loaded at once. Bound: STRATA_HASH_PREFETCH / 64 - 1 hints. */
STRATA_HASH_STEP void strata_hash_prefetch_start(const uint8_t *p, size_t len)
{
    size_t end = len < STRATA_HASH_PREFETCH ? len : STRATA_HASH_PREFETCH;
    for (size_t at = 64; at < end; at += 64) __builtin_prefetch(p + at);
}

/* One 64-byte block of words w into the four lanes. */
STRATA_HASH_STEP void strata_hash_block(uint64_t l[4], const uint64_t w[8])
{
    l[0] = strata_hash_fold(w[0] ^ l[0], w[1] ^ STRATA_HK5);
    l[1] = strata_hash_fold(w[2] ^ l[1], w[3] ^ STRATA_HK6);
    l[2] = strata_hash_fold(w[4] ^ l[2], w[5] ^ STRATA_HK1);
    l[3] = strata_hash_fold(w[6] ^ l[3], w[7] ^ STRATA_HK2);
}

STRATA_HASH_STEP uint64_t strata_hash_lanes_end(const uint64_t l[4])
{
    return strata_hash_fold(l[0] ^ STRATA_HK3, l[1] ^ STRATA_HK4) ^ strata_hash_fold(l[2] ^ STRATA_HK5, l[3] ^ STRATA_HK6);
}

/* The last n bytes at p (n <= 64 when the lanes ran) into h; len is the whole input's. */
STRATA_HASH_STEP uint64_t strata_hash_tail(const uint8_t *p, size_t n, uint64_t h, size_t len)
{
    uint64_t a, b;

    /* Bound: at most 3 iterations when the lanes ran, n/16 otherwise. */
    while (n > 16) {
        h = strata_hash_fold(strata_hash_load64(p) ^ h, strata_hash_load64(p + 8) ^ STRATA_HK5);
        p += 16;
        n -= 16;
    }
    if (n > 8) {
        a = strata_hash_load64(p);
        b = strata_hash_load64(p + n - 8);
    } else if (n >= 4) {
        a = strata_hash_load32(p);
        b = strata_hash_load32(p + n - 4);
    } else if (n > 0) {
        a = ((uint64_t)p[0] << 16) | ((uint64_t)p[n >> 1] << 8) | p[n - 1];
        b = 0;
    } else {
        a = 0;
        b = 0;
    }
    h = strata_hash_fold(a ^ h ^ STRATA_HK3, b ^ STRATA_HK4 ^ (uint64_t)len);
    return strata_hash_fold(h ^ STRATA_HK6, STRATA_HK0);
}

/* Hash len bytes at data. Reads exactly [data, data+len); len may be 0. */
static inline uint64_t strata_hash64(const void *data, size_t len, uint64_t seed)
{
    const uint8_t *p = (const uint8_t *)data;
    size_t n = len;
    uint64_t h = seed ^ STRATA_HK0 ^ ((uint64_t)len * STRATA_HK1);

    if (n > 64) {
        uint64_t l[4] = STRATA_HASH_LANES_INIT(h), w[8];
        strata_hash_prefetch_start(p, len);
        /* Bound: len/64 iterations, four independent multiplies each. */
        do {
            STRATA_HASH_PREFETCH_AHEAD(p, 0);
            memcpy(w, p, sizeof w);
            strata_hash_block(l, w);
            p += 64;
            n -= 64;
        } while (n > 64);
        h = strata_hash_lanes_end(l);
    }
    return strata_hash_tail(p, n, h, len);
}

/*
 * One 64-byte block: the words at q loaded once into registers, stored to d and hashed into l.
 * The empty asm pins the words in registers, so the compiler cannot load them from q again for
 * the hash: the block hashed is exactly the block stored, even if q changes meanwhile.
 */
STRATA_HASH_STEP void strata_hash_copy_block(uint64_t l[4], uint8_t *d, const uint8_t *q)
{
    uint64_t w[8];
    uint64_t w0 = strata_hash_load64(q), w1 = strata_hash_load64(q + 8), w2 = strata_hash_load64(q + 16),
             w3 = strata_hash_load64(q + 24), w4 = strata_hash_load64(q + 32), w5 = strata_hash_load64(q + 40),
             w6 = strata_hash_load64(q + 48), w7 = strata_hash_load64(q + 56);
    __asm__("" : "+r"(w0), "+r"(w1), "+r"(w2), "+r"(w3), "+r"(w4), "+r"(w5), "+r"(w6), "+r"(w7));
    /* Word by word: one wide store from words just spilled would stall on forwarding. */
    memcpy(d, &w0, 8);
    memcpy(d + 8, &w1, 8);
    memcpy(d + 16, &w2, 8);
    memcpy(d + 24, &w3, 8);
    memcpy(d + 32, &w4, 8);
    memcpy(d + 40, &w5, 8);
    memcpy(d + 48, &w6, 8);
    memcpy(d + 56, &w7, 8);
    w[0] = w0, w[1] = w1, w[2] = w2, w[3] = w3, w[4] = w4, w[5] = w5, w[6] = w6, w[7] = w7;
    strata_hash_block(l, w);
}

/*
 * Copy len bytes from src to dst and return strata_hash64(dst, len, seed): the same result
 * as memcpy then strata_hash64, in one pass. Each 64-byte block is loaded from src once into
 * registers, which are stored to dst and hashed; memcpy then hash reads every byte twice. For
 * a read out of the table, whose bytes come from main memory, one pass is the faster, and the
 * source is prefetched ahead (STRATA_HASH_PREFETCH).
 *
 * src may change while this runs (the table's shared memory): the hash is of exactly the
 * bytes stored at dst. No byte of src is loaded twice (strata_hash_copy_block); the tail is
 * hashed from dst. dst must not overlap src.
 */
static inline uint64_t strata_hash64_copy(uint8_t *dst, const void *src, size_t len, uint64_t seed)
{
    const uint8_t *s = (const uint8_t *)src;
    size_t at = 0;
    uint64_t h = seed ^ STRATA_HK0 ^ ((uint64_t)len * STRATA_HK1);

    if (len > 64) {
        uint64_t l[4] = STRATA_HASH_LANES_INIT(h);
        strata_hash_prefetch_start(s, len);
        /* Bound: len/64 iterations, one block copied and hashed each. */
        do {
            STRATA_HASH_PREFETCH_AHEAD(s + at, 0);
            strata_hash_copy_block(l, dst + at, s + at);
            at += 64;
        } while (len - at > 64);
        h = strata_hash_lanes_end(l);
    }
    /* The tail (at most 64 bytes) is hashed from the copy. */
    if (len > at) memcpy(dst + at, s + at, len - at);
    return strata_hash_tail(dst + at, len - at, h, len);
}

/*
 * Copy head (head_len bytes) then value (value_len bytes) to dst, contiguously, and return
 * strata_hash64(dst, head_len + value_len, seed): the same result as two memcpys then
 * strata_hash64 over dst, in one pass. For a write into the table: the hash is taken from the
 * caller's own bytes on their way to dst, so dst (the table's shared memory, usually not in
 * cache) is only written, never read back, and it is hinted for writing ahead: without those
 * hints this one pass measured slower than memcpy then hash (STRATA_HASH_PREFETCH).
 *
 * Each byte of head and value is read once, except that the tail (at most 64 bytes) is hashed
 * from the source after it is copied: head and value must not change while this runs (the
 * writer's private bytes), and must not overlap dst. The one block that straddles head and
 * value, and a tail that does, are assembled in a 64-byte local buffer first. head may be NULL
 * when head_len is 0, value when value_len is 0; either length may be 0.
 */
static inline uint64_t strata_hash64_copy_parts(uint8_t *dst, const void *head, size_t head_len, const void *value,
                                                size_t value_len, uint64_t seed)
{
    const uint8_t *hd = (const uint8_t *)head, *val = (const uint8_t *)value, *q;
    size_t len = head_len + value_len, at = 0, n, from_head;
    uint8_t buf[64];
    uint64_t h = seed ^ STRATA_HK0 ^ ((uint64_t)len * STRATA_HK1);

    if (len > 64) {
        uint64_t l[4] = STRATA_HASH_LANES_INIT(h);
        /* Bound: len/64 iterations, one block copied and hashed each, at most one assembled. */
        do {
            if (at >= head_len) {
                q = val + (at - head_len);
            } else if (head_len - at >= 64) {
                q = hd + at;
            } else { /* straddles: at + 64 <= len, so value has the rest */
                from_head = head_len - at;
                memcpy(buf, hd + at, from_head);
                memcpy(buf + from_head, val, 64 - from_head);
                q = buf;
            }
            STRATA_HASH_PREFETCH_AHEAD(dst + at, 1);
            strata_hash_copy_block(l, dst + at, q);
            at += 64;
        } while (len - at > 64);
        h = strata_hash_lanes_end(l);
    }
    n = len - at; /* 0 only when len is 0 */
    if (at >= head_len) {
        q = n ? val + (at - head_len) : buf;
    } else {
        from_head = head_len - at < n ? head_len - at : n;
        memcpy(buf, hd + at, from_head);
        if (n > from_head) memcpy(buf + from_head, val, n - from_head); /* head ends in the tail */
        q = buf;
    }
    if (n) memcpy(dst + at, q, n);
    return strata_hash_tail(q, n, h, len);
}

#endif /* STRATA_HASH_H */
