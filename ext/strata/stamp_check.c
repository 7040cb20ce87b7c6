/*
 * stamp_check.c - see stamp_check.h.
 */
#include "stamp_check.h"

#include <string.h>

#define ENTRY_MARKER 0xE1
#define ENTRY_VERSION_AT 10
#define ENTRY_HEADER_BYTES 14 /* marker, flags, expires_at, version length, stamp count */
#define STAMP_BYTES 16
#define VERSION_BYTES 8

static uint64_t load_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static unsigned load_le16(const unsigned char *p) { return (unsigned)p[0] | ((unsigned)p[1] << 8); }

void strata_tag_key(uint64_t id, char key[STRATA_TAG_KEY_LEN])
{
    static const char hex[] = "0123456789abcdef";
    memcpy(key, STRATA_TAG_KEY_PREFIX, STRATA_TAG_KEY_PREFIX_LEN);
    for (int i = STRATA_TAG_KEY_LEN - 1; i >= STRATA_TAG_KEY_PREFIX_LEN; i--) {
        key[i] = hex[id & 0xf];
        id >>= 4;
    }
}

/* Where strata_get copies a version: this buffer when the value is 8 bytes long; any other
 * length is refused (strata_get then returns STRATA_ENOMEM, an unknown here) without a copy. */
typedef struct version_buf {
    unsigned char bytes[VERSION_BYTES];
} version_buf;

static void *version_reserve(void *ctx, size_t len, uint64_t version)
{
    (void)version;
    return len == VERSION_BYTES ? ((version_buf *)ctx)->bytes : NULL;
}

strata_stamps strata_stamps_check(strata_table *t, const unsigned char *stamps, size_t count)
{
    strata_stamps answer = STRATA_STAMPS_CURRENT;
    char key[STRATA_TAG_KEY_LEN];
    version_buf held;
    strata_sink sink = {version_reserve, &held};

    /* Bound: count lookups, count <= 65535 from an entry. */
    for (size_t i = 0; i < count; i++) {
        const unsigned char *stamp = stamps + i * STAMP_BYTES;
        strata_tag_key(load_le64(stamp), key);
        if (strata_get(t, key, sizeof key, &sink, NULL) != STRATA_OK) {
            answer = STRATA_STAMPS_UNKNOWN; /* a later stamp may still be stale */
            continue;
        }
        /* held is this call's copy, validated by strata_get; both sides little-endian. */
        if (memcmp(held.bytes, stamp + VERSION_BYTES, VERSION_BYTES) != 0) return STRATA_STAMPS_STALE;
    }
    return answer;
}

strata_stamps strata_entry_stamps_check(strata_table *t, const void *bytes, size_t len)
{
    const unsigned char *p = bytes;
    size_t at, count;

    if (len < ENTRY_HEADER_BYTES || p[0] != ENTRY_MARKER) return STRATA_STAMPS_UNKNOWN;
    at = ENTRY_HEADER_BYTES + load_le16(p + ENTRY_VERSION_AT); /* just past the stamp count */
    if (at > len) return STRATA_STAMPS_UNKNOWN;
    count = load_le16(p + at - 2);
    if (count == 0 || count > (len - at) / STAMP_BYTES) return STRATA_STAMPS_UNKNOWN;
    return strata_stamps_check(t, p + at, count);
}
