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

/* Hash len bytes at data. Reads exactly [data, data+len); len may be 0. */
static inline uint64_t strata_hash64(const void *data, size_t len, uint64_t seed)
{
    const uint8_t *p = (const uint8_t *)data;
    size_t n = len;
    uint64_t h = seed ^ STRATA_HK0 ^ ((uint64_t)len * STRATA_HK1);
    uint64_t a, b;

    if (n > 64) {
        uint64_t l0 = h, l1 = h ^ STRATA_HK2, l2 = h ^ STRATA_HK3, l3 = h ^ STRATA_HK4;
        /* Bound: len/64 iterations, four independent multiplies each. */
        do {
            l0 = strata_hash_fold(strata_hash_load64(p) ^ l0, strata_hash_load64(p + 8) ^ STRATA_HK5);
            l1 = strata_hash_fold(strata_hash_load64(p + 16) ^ l1, strata_hash_load64(p + 24) ^ STRATA_HK6);
            l2 = strata_hash_fold(strata_hash_load64(p + 32) ^ l2, strata_hash_load64(p + 40) ^ STRATA_HK1);
            l3 = strata_hash_fold(strata_hash_load64(p + 48) ^ l3, strata_hash_load64(p + 56) ^ STRATA_HK2);
            p += 64;
            n -= 64;
        } while (n > 64);
        h = strata_hash_fold(l0 ^ STRATA_HK3, l1 ^ STRATA_HK4) ^ strata_hash_fold(l2 ^ STRATA_HK5, l3 ^ STRATA_HK6);
    }
    /* Bound: at most 3 iterations here (n <= 64 on entry when the lanes ran). */
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

#endif /* STRATA_HASH_H */
