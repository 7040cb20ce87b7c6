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

/* Odd constants from the hex digits of pi; any odd, dense bit patterns would do. */
#define STRATA_HK0 0x243F6A8885A308D3ULL
#define STRATA_HK1 0x13198A2E03707345ULL
#define STRATA_HK2 0xA4093822299F31D1ULL
#define STRATA_HK3 0x082EFA98EC4E6C89ULL
#define STRATA_HK4 0x452821E638D01377ULL
#define STRATA_HK5 0xBE5466CF34E90C6DULL
#define STRATA_HK6 0xC0AC29B7C97C50DDULL

static inline uint64_t strata_hash_fold(uint64_t a, uint64_t b)
{
    unsigned __int128 r = (unsigned __int128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t strata_hash_load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint64_t strata_hash_load32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The four lanes' start from h. */
#define STRATA_HASH_LANES_INIT(h) {(h), (h) ^ STRATA_HK2, (h) ^ STRATA_HK3, (h) ^ STRATA_HK4}

/* One 64-byte block of words w into the four lanes. */
static inline void strata_hash_block(uint64_t l[4], const uint64_t w[8])
{
    l[0] = strata_hash_fold(w[0] ^ l[0], w[1] ^ STRATA_HK5);
    l[1] = strata_hash_fold(w[2] ^ l[1], w[3] ^ STRATA_HK6);
    l[2] = strata_hash_fold(w[4] ^ l[2], w[5] ^ STRATA_HK1);
    l[3] = strata_hash_fold(w[6] ^ l[3], w[7] ^ STRATA_HK2);
}

static inline uint64_t strata_hash_lanes_end(const uint64_t l[4])
{
    return strata_hash_fold(l[0] ^ STRATA_HK3, l[1] ^ STRATA_HK4) ^ strata_hash_fold(l[2] ^ STRATA_HK5, l[3] ^ STRATA_HK6);
}

/* The last n bytes at p (n <= 64 when the lanes ran) into h; len is the whole input's. */
static inline uint64_t strata_hash_tail(const uint8_t *p, size_t n, uint64_t h, size_t len)
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
        /* Bound: len/64 iterations, four independent multiplies each. */
        do {
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
 * Copy len bytes from src to dst and return strata_hash64(dst, len, seed): the same result
 * as memcpy then strata_hash64, in one pass. Each 64-byte block is loaded from src once into
 * registers, which are stored to dst and hashed; memcpy then hash reads every byte twice. For
 * a read out of the table, whose bytes come from main memory, one pass is the faster.
 *
 * src may change while this runs (the table's shared memory): the hash is of exactly the
 * bytes stored at dst. No byte of src is loaded twice: the empty asm pins each block's words
 * in registers, so the compiler cannot load them from src again for the hash. dst must not
 * overlap src.
 */
static inline uint64_t strata_hash64_copy(uint8_t *dst, const void *src, size_t len, uint64_t seed)
{
    const uint8_t *s = (const uint8_t *)src;
    size_t at = 0;
    uint64_t h = seed ^ STRATA_HK0 ^ ((uint64_t)len * STRATA_HK1);

    if (len > 64) {
        uint64_t l[4] = STRATA_HASH_LANES_INIT(h), w[8];
        /* Bound: len/64 iterations, one block copied and hashed each. */
        do {
            const uint8_t *q = s + at;
            uint8_t *d = dst + at;
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
            at += 64;
        } while (len - at > 64);
        h = strata_hash_lanes_end(l);
    }
    /* The tail (at most 64 bytes) is hashed from the copy. */
    if (len > at) memcpy(dst + at, s + at, len - at);
    return strata_hash_tail(dst + at, len - at, h, len);
}

#endif /* STRATA_HASH_H */
