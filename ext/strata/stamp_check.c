/*
 * stamp_check.c - see stamp_check.h.
 */
#include "stamp_check.h"

#include <string.h>

#define ENTRY_MARKER 0xE1
#define ENTRY_PUT_BACK_MARKER 0xE3 /* the same layout: an entry put back for race_condition_ttl */
#define ENTRY_STAMPED 0x80 /* in the flags byte, offset 1 */
#define ENTRY_VERSION_AT 10
#define ENTRY_HEADER_BYTES 14 /* marker, flags, expires_at, version length, stamp count */
#define STAMP_BYTES 16
#define VERSION_BYTES 8

static uint64_t load_le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static unsigned load_le16(const unsigned char *p) { return (unsigned)p[0] | ((unsigned)p[1] << 8); }

/* The 16 lowercase hex digits of id, most significant first, two at a time. */
static void write_hex(uint64_t id, char *out)
{
    static const char digits[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
                                 "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
                                 "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
                                 "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
                                 "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
                                 "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
                                 "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
                                 "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";
    for (int i = 7; i >= 0; i--) {
        memcpy(out + 2 * i, digits + 2 * (id & 0xff), 2);
        id >>= 8;
    }
}

int strata_tag_keys_set(strata_tag_keys *keys, const char *prefix, size_t len)
{
    if (len == 0 || len > STRATA_TAG_PREFIX_MAX) return -1;
    memcpy(keys->prefix, prefix, len);
    keys->prefix_len = len;
    return 0;
}

size_t strata_tag_key(const strata_tag_keys *keys, uint64_t id, char key[STRATA_TAG_KEY_MAX])
{
    size_t n = keys->prefix_len;

    if (n == 0 || n > STRATA_TAG_PREFIX_MAX) return 0;
    memcpy(key, keys->prefix, n);
    write_hex(id, key + n);
    return n + 16;
}

/* Where strata_get_at copies a version: this buffer when the value is 8 bytes long; any other
 * length is refused (strata_get_at then returns STRATA_ENOMEM, an unknown here) without a copy. */
typedef struct version_buf {
    unsigned char bytes[VERSION_BYTES];
} version_buf;

static void *version_reserve(void *ctx, size_t len, uint64_t version)
{
    (void)version;
    return len == VERSION_BYTES ? ((version_buf *)ctx)->bytes : NULL;
}

/* The hash of id's version key (key, len bytes), from memo when it holds it, else made and
 * kept there. */
static uint64_t key_hash(strata_table *t, strata_key_memo *memo, uint64_t id, const char *key, size_t len)
{
    unsigned slot;
    uint64_t hash;

    if (memo == NULL) return strata_key_hash(t, key, len);
    slot = (unsigned)(id % STRATA_KEY_MEMO_SLOTS);
    if ((memo->known >> slot & 1) && memo->id[slot] == id) return memo->hash[slot];
    hash = strata_key_hash(t, key, len);
    memo->id[slot] = id;
    memo->hash[slot] = hash;
    memo->known |= (uint64_t)1 << slot;
    return hash;
}

strata_stamps strata_stamps_check(strata_table *t, const unsigned char *stamps, size_t count,
                                  const strata_tag_keys *keys, strata_key_memo *memo)
{
    strata_stamps answer = STRATA_STAMPS_CURRENT;
    uint64_t now = 0; /* read once, by the first lookup that finds an item with an expiry */
    char key[STRATA_TAG_KEY_MAX];
    size_t prefix_len = keys->prefix_len, key_len = prefix_len + 16;
    version_buf held;
    strata_sink sink = {version_reserve, &held};

    if (count == 0) return STRATA_STAMPS_CURRENT;
    if (prefix_len == 0 || prefix_len > STRATA_TAG_PREFIX_MAX) return STRATA_STAMPS_UNKNOWN;
    memcpy(key, keys->prefix, prefix_len);
    /* Bound: count lookups, count <= 65535 from an entry. */
    for (size_t i = 0; i < count; i++) {
        const unsigned char *stamp = stamps + i * STAMP_BYTES;
        uint64_t id = load_le64(stamp);
        write_hex(id, key + prefix_len);
        if (strata_get_hashed(t, key, key_len, key_hash(t, memo, id, key, key_len), &sink, NULL, &now) != STRATA_OK) {
            answer = STRATA_STAMPS_UNKNOWN; /* a later stamp may still be stale */
            continue;
        }
        /* held is this call's copy, validated by strata_get_at; both sides little-endian. */
        if (memcmp(held.bytes, stamp + VERSION_BYTES, VERSION_BYTES) != 0) return STRATA_STAMPS_STALE;
    }
    return answer;
}

strata_stamps strata_entry_stamps_check(strata_table *t, const void *bytes, size_t len, const strata_tag_keys *keys,
                                        strata_key_memo *memo)
{
    const unsigned char *p = bytes;
    size_t at, count;

    if (len < ENTRY_HEADER_BYTES || (p[0] != ENTRY_MARKER && p[0] != ENTRY_PUT_BACK_MARKER)) return STRATA_STAMPS_UNKNOWN;
    at = ENTRY_HEADER_BYTES + load_le16(p + ENTRY_VERSION_AT); /* just past the stamp count */
    if (at > len) return STRATA_STAMPS_UNKNOWN;
    count = load_le16(p + at - 2);
    if (count == 0 || count > (len - at) / STAMP_BYTES) return STRATA_STAMPS_UNKNOWN;
    return strata_stamps_check(t, p + at, count, keys, memo);
}

int strata_entry_stamped(const void *bytes, size_t len)
{
    const unsigned char *p = bytes;

    return len >= 2 && (p[0] == ENTRY_MARKER || p[0] == ENTRY_PUT_BACK_MARKER) && (p[1] & ENTRY_STAMPED) != 0;
}

int strata_entry_plain(const void *bytes, size_t len, size_t *at, int *stamped)
{
    const unsigned char *p = bytes;
    unsigned kind, flags, count;

    if (len < ENTRY_HEADER_BYTES || p[0] != ENTRY_MARKER) return 0;
    flags = p[1];
    kind = flags & ~(unsigned)ENTRY_STAMPED;
    if (kind != STRATA_ENTRY_BINARY && kind != STRATA_ENTRY_UTF8 && kind != STRATA_ENTRY_ASCII) return 0;
    for (int i = 2; i < ENTRY_VERSION_AT + 2; i++) /* expires_at and the version length */
        if (p[i] != 0) return 0;
    count = load_le16(p + ENTRY_VERSION_AT + 2);
    if (!(flags & ENTRY_STAMPED)) {
        if (count != 0) return 0;
        *at = ENTRY_HEADER_BYTES;
        *stamped = 0;
        return (int)kind;
    }
    if (count == 0 || count > (len - ENTRY_HEADER_BYTES) / STAMP_BYTES) return 0;
    *at = ENTRY_HEADER_BYTES + (size_t)count * STAMP_BYTES;
    *stamped = 1;
    return (int)kind;
}
