/*
 * stamp_check.h - the check of a tagged entry's dependency stamps against the tag versions the
 * same L1 table holds, in one call and without allocating: the hit path of a tagged read
 * (SharedMemory#get_current, the read and the check in one call, for Stack#get_host; and
 * SharedMemory#check_stamps for Dependencies#current?; docs/coherence.md). stamp_check.c
 * implements it on strata_get_hashed alone, so it follows table.h's reader protocol (lock-free,
 * seqlock and checksum validated, a miss rather than bytes it could not validate) and takes no
 * lock: it never waits and never holds one.
 *
 * WHAT IT READS (both layouts are fixed by the Ruby side; a change there must change these)
 *   entry bytes (lib/strata/entry.rb), integers little-endian:
 *     offset 0 u8 marker 0xE1 (or 0xE3, the same layout: an entry put back for
 *     race_condition_ttl); 1 u8 flags; 2 u64 expires_at; 10 u16 version length n, then n
 *     bytes; 12+n u16 stamp count c; 14+n c pairs of (u64 tag id, u64 tag version); payload.
 *   a tag's version (lib/strata/dependencies.rb, KEY_FORMAT): the table's value under the key
 *     made of the prefix the caller gives (strata_tag_keys: Dependencies::VERSION_PREFIX,
 *     handed to the table by Ruby, SharedMemory#version_key_prefix=) followed by the id as 16
 *     lowercase hex digits; 8 bytes, the version little-endian. No prefix given: no version
 *     is looked up, and every check is UNKNOWN.
 *
 * TRUST
 *   The entry bytes are the caller's private copy: every length is checked against len before
 *   anything past the header is read. A version is copied out of the table by strata_get_at into
 *   a private 8-byte buffer, validated there (length, checksum, seqlock) and compared from that
 *   copy only; a value of any other length is never copied.
 *
 * ANSWERS
 *   STALE when the table holds a well-formed version that differs from a stamp: the entry can
 *   never be current again. Else UNKNOWN when some stamp could not be settled here (its version
 *   is absent, expired, fenced, torn, of the wrong length, or the entry bytes are malformed):
 *   the caller asks the lower tiers, which also report and repair a bad version. Else CURRENT:
 *   every stamp equals the version the table held when it was read. Like any lock-free read,
 *   a version bumped while the call runs may be seen before or after the bump; one bumped
 *   before the call began is always seen (strata_get's guarantee), so a stamp that was stale
 *   when the call began never passes.
 *
 * COST
 *   O(c) lookups of one bucket each and no allocation. The clock is read at most once per call
 *   (strata_get_at), and only when a version has an expiry (copies of a lower tier's versions
 *   do: coherence_interval). Bound: c <= 65535 (u16).
 */
#ifndef STRATA_STAMP_CHECK_H
#define STRATA_STAMP_CHECK_H

#include <stddef.h>

#include "table.h"

typedef enum strata_stamps {
    STRATA_STAMPS_CURRENT = 0,
    STRATA_STAMPS_STALE,
    STRATA_STAMPS_UNKNOWN
} strata_stamps;

/* How the version keys are made: prefix_len bytes of prefix, then the id in 16 hex digits.
 * prefix_len 0: none given (all zero is that). Set with strata_tag_keys_set; owned by its
 * caller (a table handle keeps one), read only by the checks. */
#define STRATA_TAG_PREFIX_MAX 32
#define STRATA_TAG_KEY_MAX (STRATA_TAG_PREFIX_MAX + 16)
typedef struct strata_tag_keys {
    size_t prefix_len;
    char prefix[STRATA_TAG_PREFIX_MAX];
} strata_tag_keys;

/* Sets keys' prefix to prefix[0..len): 0, or -1 (keys unchanged) when len is 0 or over
 * STRATA_TAG_PREFIX_MAX. */
int strata_tag_keys_set(strata_tag_keys *keys, const char *prefix, size_t len);

/* Writes tag id's version key into key (not NUL-terminated) and returns its length; 0 (nothing
 * written) when keys has no prefix. */
size_t strata_tag_key(const strata_tag_keys *keys, uint64_t id, char key[STRATA_TAG_KEY_MAX]);

/*
 * The version keys' hashes (strata_key_hash) of the tags one table's checks met lately, so that
 * checking them again hashes no key: a hit's stamps are mostly the same few tags. Direct-mapped
 * by tag id, STRATA_KEY_MEMO_SLOTS slots; a slot is filled when its id is first met and
 * overwritten by the next id that maps to it. All zero is empty.
 *   Bound: 64 slots, 1 KiB. Owner: one table handle (its hashes are that table's: the seed is
 *   per file); not for two threads at once (Ruby's GVL serialises the extension's checks). A
 *   wrong hash is only a miss (strata_get_hashed): never a stamp passed that should not be.
 */
#define STRATA_KEY_MEMO_SLOTS 64
typedef struct strata_key_memo {
    uint64_t known;                         /* bit i: slot i is filled */
    uint64_t id[STRATA_KEY_MEMO_SLOTS];
    uint64_t hash[STRATA_KEY_MEMO_SLOTS];
} strata_key_memo;

/* Checks count stamps, laid out as in an entry (count pairs of u64 LE id, u64 LE version), at
 * stamps, their versions under the keys keys makes (none: UNKNOWN). count 0 is CURRENT. memo:
 * the table's strata_key_memo for keys (cleared when keys change), or NULL to hash every key. */
strata_stamps strata_stamps_check(strata_table *t, const unsigned char *stamps, size_t count,
                                  const strata_tag_keys *keys, strata_key_memo *memo);

/* Checks the stamps of the entry in bytes[0..len): UNKNOWN when the header is malformed or the
 * entry has no stamps (the caller's decoder says why). keys and memo as strata_stamps_check's. */
strata_stamps strata_entry_stamps_check(strata_table *t, const void *bytes, size_t len, const strata_tag_keys *keys,
                                        strata_key_memo *memo);

/* Whether bytes[0..len) start like an entry with stamps: the marker, and STAMPED (0x80) in the
 * flags byte. Two bytes read, nothing else checked (Entry.stamped? in Ruby). */
int strata_entry_stamped(const void *bytes, size_t len);

/* The kinds of a bare String payload (the flags byte's KIND bits, lib/strata/entry.rb). */
#define STRATA_ENTRY_BINARY 0x04
#define STRATA_ENTRY_UTF8 0x06
#define STRATA_ENTRY_ASCII 0x08

/* Whether bytes[0..len) are an entry whose value is a bare String, as Entry.plain_string in Ruby
 * takes it: the MARKER (not a put-back), no flag but a String kind and STAMPED, expires_at 0,
 * no version, and with STAMPED at least one stamp, all inside len. Returns the kind
 * (STRATA_ENTRY_BINARY, _UTF8 or _ASCII) and sets *at to the payload's offset and *stamped to
 * whether there are stamps (which the caller checks: strata_entry_stamps_check); 0 for any
 * other bytes, *at and *stamped then unset. Every length is checked against len. */
int strata_entry_plain(const void *bytes, size_t len, size_t *at, int *stamped);

#endif
