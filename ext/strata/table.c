/*
 * table.c - the shared-memory table. The contract (layout, lock rules, caveats) is in table.h;
 * comments here explain only what that header does not.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* flock, MADV_WIPEONFORK, getrandom */
#endif

#include "table.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "counters.h"
#include "fill_locks.h"
#include "hash.h"
#include "lock.h"

/* ------------------------------------------------------------------------------------------ */
/* Shared structs (layout documented in table.h)                                              */
/* ------------------------------------------------------------------------------------------ */

#define MAGIC 0x314C415441525453ULL /* "STRATAL1" read as a little-endian u64 */
#define LAYOUT_VERSION 6u /* 2: the bucket word (seq | fence mask), the shard fenced count;
                            * 3: fenced is 64 bits, the shard's fence log;
                            * 4: the host's counters region (counters.h) before the index;
                            * 5: POLLED items (an item flag an older build would ignore) and
                            *    the counters region's polled_until;
                            * 6: the fill locks region (fill_locks.h) after the counters */
#define HEADER_BYTES 4096u
#define CTL_BYTES 128u
#define BUCKET_BYTES 64u
#define SEG_HDR 16u
#define ITEM_HDR 24u
#define STATE_INITIALIZING 1u
#define STATE_READY 2u
#define STATE_RETIRED STRATA_STATE_RETIRED /* a rebuilder is about to rename another file over this one */
#define SLOT_REF (1ULL << 63)
#define TAG_MASK 0x7FFFFFFFu
#define SEQ_ONE (1ULL << 32)   /* a bucket word's seq is its high 32 bits; this is seq 1 (odd) */
#define FENCE_MASK 0xFFFFFFFFULL /* ... and its fence mask the low 32 bits */
#define FENCE_LOG 10 /* fenced buckets a shard remembers; fits 128 bytes with a 48-byte mutex */

#define READ_ATTEMPTS 4     /* a reader gives up (miss, torn_reads) after this many tries */
#define SEQ_SPINS 64        /* pauses a reader waits for an odd seq to turn even, per attempt */
#define FLOCK_WAIT_MS 1000  /* how long an opener of an unbuilt or bad file waits for its builder */
#define OPEN_ATTEMPTS 8     /* reopen when the path was replaced while we opened or waited */
#define RESERVE_CHUNK (1u << 20) /* posix_fallocate step: an interrupted call loses only this */
#define RESERVE_TRIES 64    /* posix_fallocate calls per chunk interrupted (EINTR) before we give up */

struct file_header {
    uint64_t magic;
    uint32_t version;
    uint32_t state;
    uint64_t fingerprint;
    uint64_t file_size;
    uint32_t shards;
    uint32_t buckets_per_shard;
    uint32_t segments_per_shard;
    uint32_t segment_size;
    uint64_t ctl_offset;
    uint64_t index_offset;
    uint64_t data_offset;
    uint64_t seed;
    uint32_t creator_uid;
    uint32_t creator_pid;
    uint64_t created_ms;
    uint64_t boot_id; /* boot_id_now() of the builder's boot: a lock word outlives no reboot */
    uint64_t check;   /* hash of every field above, state excluded (it changes once) */
};

struct shard_ctl {
    pthread_mutex_t lock;
    uint32_t active;   /* segment being appended to */
    uint32_t next_cas; /* cas of the next item written; never 0 */
    uint64_t drops;
    uint64_t rotations;
    uint64_t fenced;         /* fences set and not yet cleared; atomic, written without the lock */
    uint32_t fence_overflow; /* nonzero: fence_log missed a bucket, the next holder scans them all */
    uint32_t fence_log[FENCE_LOG]; /* fenced bucket + 1, 0 = free entry; see fence_log_add */
};

struct bucket {
    uint64_t word; /* seq (high 32 bits) | fence mask (low 32 bits); only ever changed atomically */
    uint64_t slot[STRATA_SLOTS_PER_BUCKET];
};

struct item_hdr {
    uint32_t value_len;
    uint32_t checksum;
    uint64_t expires_ms;
    uint32_t cas;
    uint16_t key_len;
    uint8_t flags;
    uint8_t unused;
};

struct seg_hdr {
    uint32_t fill;
    uint32_t unused;
    uint64_t started_ms; /* when the writer began appending to it (table.h); advisory */
};

_Static_assert(sizeof(struct file_header) <= HEADER_BYTES, "header fits its page");
_Static_assert(sizeof(struct shard_ctl) <= CTL_BYTES, "shard control block fits 128 bytes");
_Static_assert(sizeof(struct bucket) == BUCKET_BYTES, "a bucket is one cache line");
_Static_assert(sizeof(struct item_hdr) == ITEM_HDR, "item header is 24 bytes");
_Static_assert(sizeof(struct seg_hdr) == SEG_HDR, "segment header is 16 bytes");

/* Changes whenever a build would lay the file out differently (LMDB-style format word). */
static uint64_t layout_fingerprint(void)
{
    const uint16_t endian = 0x0102;
    uint8_t first;
    memcpy(&first, &endian, 1);
    return ((uint64_t)sizeof(void *) << 56) | ((uint64_t)sizeof(pthread_mutex_t) << 48) |
           ((uint64_t)sizeof(struct shard_ctl) << 40) | ((uint64_t)sizeof(struct item_hdr) << 32) |
           ((uint64_t)sizeof(struct bucket) << 24) | ((uint64_t)sizeof(struct seg_hdr) << 16) |
           ((uint64_t)(sizeof(struct file_header) / 8) << 8) | first;
}

/* ------------------------------------------------------------------------------------------ */
/* The per-process handle                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Counters in a private page that reads as zeros in a forked child (MADV_WIPEONFORK). */
struct proc_page {
    strata_counters c;
    pid_t pid; /* 0 in a fresh child: stats_get then starts this process's count */
    uint32_t slot;   /* the host counters slot this handle claimed + 1; 0 = none */
    uint64_t *words; /* where this process adds to the host's counters (strata_counter_words):
                      * its slot's words, or unslotted below; NULL until the first count */
    uint64_t unslotted[STRATA_COUNTERS]; /* when every slot had a live owner */
};

_Static_assert(sizeof(struct proc_page) <= 4096, "the per-handle page is one page");

struct strata_table {
    uint8_t *base;
    size_t map_len;
    strata_geometry geo;
    uint64_t seed;
    uint64_t created_ms;       /* the header's, copied once at open: bounds segment starts */
    uint64_t shard_data_bytes; /* segments_per_shard * segment_size */
    uint32_t shard_mask;
    uint64_t lock_timeout_ns;
    struct proc_page *proc;
    int held_locks; /* taken by strata_lock_shard and not yet released */
};

#define COUNT(t, field) count_add(&(t)->proc->c.field, 1)
#define COUNT_HOST(t, row, c) strata_counter_add(strata_counter_words(t), STRATA_TIER_COUNTER(row, c), 1)

/* Plain per-handle counter; relaxed atomics keep concurrent threads free of UB (a lost
 * increment is acceptable) without a locked instruction on the hot path. */
static inline void count_add(uint64_t *c, uint64_t n)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                              */
/* ------------------------------------------------------------------------------------------ */

static const char *const status_messages[STRATA_STATUS_COUNT] = {
    [STRATA_OK] = "ok",
    [STRATA_NOT_FOUND] = "not found",
    [STRATA_NOT_STORED] = "not stored",
    [STRATA_BUSY] = "shard lock busy",
    [STRATA_LOCK_TIMEOUT] = "timed out waiting for the shard lock",
    [STRATA_TOO_LARGE] = "key and value are larger than max_value_size",
    [STRATA_NOT_NUMBER] = "value is not an unsigned decimal number",
    [STRATA_EINVAL] = "invalid argument",
    [STRATA_EGEOMETRY] = "size does not fit the requested geometry",
    [STRATA_EUNSAFE] = "refusing a file owned by another user, readable or writable by group or others, with "
                       "more than one link, a symlink, or not a regular file",
    [STRATA_EIO] = "system call failed",
    [STRATA_ENOSPC] = "no space to reserve the table file (is /dev/shm too small?)",
    [STRATA_EFLOCK] = "timed out waiting for another process building the table file",
    [STRATA_ELOCK] = "shard mutex is not usable",
    [STRATA_ENOMEM] = "out of memory",
    [STRATA_EUNSAFE_DIR] = "refusing the file's directory: owned by another user, writable by group or others, "
                           "or a symlink",
    [STRATA_EFOREIGN] = "not a Strata table (no table magic number); refusing to overwrite it, remove it yourself",
    [STRATA_ERETIRED] = "the table file was replaced by a rebuild, and opening the new one failed",
};

const char *strata_strerror(strata_status status)
{
    if ((unsigned)status >= STRATA_STATUS_COUNT) return "unknown status";
    return status_messages[status];
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline uint64_t align8(uint64_t n) { return (n + 7u) & ~(uint64_t)7u; }

static inline uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

static inline int is_expired(uint64_t expires_ms, uint64_t *now)
{
    if (expires_ms == 0) return 0;
    if (*now == 0) *now = now_ms();
    return *now >= expires_ms;
}

static uint64_t polled_until_load(const strata_table *t);

/* Whether an item reads as absent: expired, or STRATA_ITEM_POLLED while the host's poller does
 * not vouch for the table (table.h, POLLED ITEMS). Every liveness test of an item goes here. */
static inline int item_dead(const strata_table *t, const struct item_hdr *h, uint64_t *now)
{
    if (is_expired(h->expires_ms, now)) return 1;
    if (!(h->flags & STRATA_ITEM_POLLED)) return 0;
    if (*now == 0) *now = now_ms();
    return *now >= polled_until_load(t);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("pause");
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t random_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        v = strata_hash64(&ts, sizeof ts, (uint64_t)getpid() ^ (uint64_t)(uintptr_t)&v);
    }
    return v;
}

/* ------------------------------------------------------------------------------------------ */
/* Geometry                                                                                   */
/* ------------------------------------------------------------------------------------------ */

strata_status strata_geometry_resolve(const strata_options *o, strata_geometry *g, const char **what)
{
    uint64_t size = o->size, shards = o->shards, seg = o->segment_size, segs, buckets;
    uint64_t ctl_bytes, avail, index_bytes;

    memset(g, 0, sizeof *g);
    *what = NULL;
    if (size < STRATA_MIN_SIZE) {
        *what = "size must be >= 1 MiB";
        return STRATA_EINVAL;
    }
    if (size > (1ULL << 40)) {
        *what = "size must be <= 1 TiB";
        return STRATA_EINVAL;
    }
    if (shards == 0) {
        shards = 16;
        /* Bound: at most 4 halvings. */
        while (shards > 1 && size / shards < (512u << 10)) shards >>= 1;
    }
    if (shards > STRATA_MAX_SHARDS || (shards & (shards - 1)) != 0) {
        *what = "shards must be a power of two between 1 and 256";
        return STRATA_EINVAL;
    }
    if (seg == 0) {
        uint64_t want = size / (shards * 16);
        seg = 64u << 10;
        /* Bound: at most 6 doublings (64 KiB to 4 MiB). */
        while (seg * 2 <= want && seg < (4u << 20)) seg *= 2;
    } else if (seg % 4096u != 0 || seg < STRATA_MIN_SEGMENT || seg > STRATA_MAX_SEGMENT) {
        *what = "segment_size must be a multiple of 4096 between 4 KiB and 64 MiB";
        return STRATA_EINVAL;
    }

    ctl_bytes = round_up(shards * CTL_BYTES, 4096);
    avail = size - HEADER_BYTES - ctl_bytes - STRATA_COUNTERS_BYTES - STRATA_FILL_LOCK_BYTES;
    if (o->slots != 0) {
        if (o->slots > size / 8) { /* also keeps the products below from overflowing */
            *what = "slots: the index alone would not fit in size";
            return STRATA_EGEOMETRY;
        }
        buckets = (o->slots + shards * STRATA_SLOTS_PER_BUCKET - 1) / (shards * STRATA_SLOTS_PER_BUCKET);
        index_bytes = round_up(shards * buckets * BUCKET_BYTES, 4096);
        if (index_bytes >= avail) {
            *what = "slots: the index alone would not fit in size";
            return STRATA_EGEOMETRY;
        }
        segs = (avail - index_bytes) / shards / seg;
    } else {
        /* One slot per STRATA_DATA_PER_SLOT data bytes; the index also takes whatever is left
         * after whole segments. */
        uint64_t per_shard = avail / shards;
        uint64_t per_data = per_shard * (STRATA_SLOTS_PER_BUCKET * STRATA_DATA_PER_SLOT) /
                            (STRATA_SLOTS_PER_BUCKET * STRATA_DATA_PER_SLOT + BUCKET_BYTES);
        segs = per_data / seg;
        index_bytes = (avail - shards * segs * seg) / 4096 * 4096;
        buckets = index_bytes / (shards * BUCKET_BYTES);
        index_bytes = round_up(shards * buckets * BUCKET_BYTES, 4096);
    }
    if (segs < 2) {
        *what = "size is too small for that many shards of 2 segments each (lower shards or "
                "segment_size, or raise size)";
        return STRATA_EGEOMETRY;
    }
    if (buckets < 1 || buckets > UINT32_MAX) {
        *what = "slots out of range for this size";
        return STRATA_EGEOMETRY;
    }
    if (segs * seg / 8 >= UINT32_MAX || segs > UINT32_MAX) {
        *what = "a shard's data must stay under 32 GiB (raise shards)";
        return STRATA_EGEOMETRY;
    }
    g->size = size;
    g->shards = (uint32_t)shards;
    g->buckets_per_shard = (uint32_t)buckets;
    g->segments_per_shard = (uint32_t)segs;
    g->segment_size = (uint32_t)seg;
    g->slots = shards * buckets * STRATA_SLOTS_PER_BUCKET;
    g->ctl_offset = HEADER_BYTES;
    g->counters_offset = HEADER_BYTES + ctl_bytes;
    g->fill_locks_offset = g->counters_offset + STRATA_COUNTERS_BYTES;
    g->index_offset = g->fill_locks_offset + STRATA_FILL_LOCK_BYTES;
    g->data_offset = g->index_offset + index_bytes;
    g->data_bytes = shards * segs * seg;
    g->max_value_size = seg - SEG_HDR - ITEM_HDR;
    if (g->data_offset + g->data_bytes > size) {
        *what = "size does not fit the geometry";
        return STRATA_EGEOMETRY;
    }
    return STRATA_OK;
}

const strata_geometry *strata_geometry_of(const strata_table *t) { return &t->geo; }

/* ------------------------------------------------------------------------------------------ */
/* Addressing                                                                                 */
/* ------------------------------------------------------------------------------------------ */

typedef struct keyref {
    uint64_t hash;
    uint32_t shard;
    uint32_t bucket;
    uint32_t tag;
} keyref;

static inline keyref locate_hash(const strata_table *t, uint64_t hash)
{
    keyref k;
    k.hash = hash;
    k.shard = (uint32_t)(k.hash >> 56) & t->shard_mask;
    k.bucket = (uint32_t)((((k.hash >> 24) & 0xFFFFFFFFu) * t->geo.buckets_per_shard) >> 32);
    k.tag = (uint32_t)k.hash & TAG_MASK;
    return k;
}

static inline keyref locate(const strata_table *t, const void *key, size_t len)
{
    return locate_hash(t, strata_hash64(key, len, t->seed));
}

static inline struct shard_ctl *ctl_of(const strata_table *t, uint32_t s)
{
    return (struct shard_ctl *)(t->base + t->geo.ctl_offset + (size_t)s * CTL_BYTES);
}

static inline struct bucket *bucket_of(const strata_table *t, uint32_t s, uint32_t b)
{
    return (struct bucket *)(t->base + t->geo.index_offset +
                             ((size_t)s * t->geo.buckets_per_shard + b) * BUCKET_BYTES);
}

static inline uint8_t *shard_data(const strata_table *t, uint32_t s)
{
    return t->base + t->geo.data_offset + (size_t)s * t->shard_data_bytes;
}

static inline struct seg_hdr *seg_of(const strata_table *t, uint32_t s, uint32_t seg)
{
    return (struct seg_hdr *)(shard_data(t, s) + (size_t)seg * t->geo.segment_size);
}

static inline uint32_t slot_loc(uint64_t w) { return (uint32_t)w; }
static inline uint32_t slot_tag(uint64_t w) { return (uint32_t)(w >> 32) & TAG_MASK; }
static inline uint64_t make_slot(uint32_t loc, uint32_t tag) { return loc | ((uint64_t)tag << 32); }
static inline uint32_t loc_for(uint64_t shard_offset) { return (uint32_t)(shard_offset / 8 + 1); }

/*
 * The item loc points at, with its header copied to *h and its 8-aligned length to *ext, or NULL
 * when the header or the whole item would fall outside the shard's data or its segment. Safe on
 * untrusted, concurrently changing bytes: the header is read once, through atomic loads.
 */
static const uint8_t *item_at(const strata_table *t, uint32_t s, uint32_t loc, struct item_hdr *h,
                              uint64_t *ext)
{
    uint64_t off, in_seg, words[3], total;
    const uint8_t *p;

    if (loc == 0) return NULL;
    off = (uint64_t)(loc - 1) * 8;
    in_seg = off % t->geo.segment_size;
    if (off >= t->shard_data_bytes || in_seg < SEG_HDR || in_seg + ITEM_HDR > t->geo.segment_size)
        return NULL;
    p = shard_data(t, s) + off;
    words[0] = __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED);
    words[1] = __atomic_load_n((const uint64_t *)p + 1, __ATOMIC_RELAXED);
    words[2] = __atomic_load_n((const uint64_t *)p + 2, __ATOMIC_RELAXED);
    memcpy(h, words, sizeof *h);
    if (h->key_len == 0 || h->key_len > STRATA_MAX_KEY) return NULL;
    total = ITEM_HDR + (uint64_t)h->key_len + h->value_len;
    if (in_seg + total > t->geo.segment_size) return NULL;
    *ext = align8(total);
    return p;
}

/* The checksum's seed: the key (through its seeded hash) and the header fields. */
static uint64_t item_checksum_seed(uint64_t key_hash, const struct item_hdr *h)
{
    return key_hash ^
           strata_hash_fold(h->expires_ms ^ STRATA_HK2, (((uint64_t)h->value_len << 32) | h->cas) ^ STRATA_HK3) ^
           (((uint64_t)h->key_len << 8) | h->flags);
}

static uint32_t checksum_fold(uint64_t x) { return (uint32_t)(x ^ (x >> 32)); }

/* Checksum of an item: covers the key (through its seeded hash), header fields and value. */
static uint32_t item_checksum(uint64_t key_hash, const struct item_hdr *h, const void *value)
{
    return checksum_fold(strata_hash64(value, h->value_len, item_checksum_seed(key_hash, h)));
}

/* item_checksum of the value at src, which it copies to dst on the way: one read of src, and
 * the checksum is of the copy (strata_hash64_copy). For a read: src is the table's. */
static uint32_t item_checksum_copy(uint64_t key_hash, const struct item_hdr *h, uint8_t *dst, const void *src)
{
    return checksum_fold(strata_hash64_copy(dst, src, h->value_len, item_checksum_seed(key_hash, h)));
}

/* item_checksum of head followed by value (h->value_len bytes in all), which it copies to dst on
 * the way, hashing the caller's bytes (strata_hash64_copy_parts). For a write: dst is the
 * table's, written and not read back; head and value are the writer's own and do not change. */
static uint32_t item_checksum_copy_parts(uint64_t key_hash, const struct item_hdr *h, uint8_t *dst, const void *head,
                                         size_t head_len, const void *value)
{
    return checksum_fold(strata_hash64_copy_parts(dst, head, head_len, value, h->value_len - head_len,
                                                  item_checksum_seed(key_hash, h)));
}

/* ------------------------------------------------------------------------------------------ */
/* Seqlock                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Reader: the bucket's word (seq and fence mask), waiting a bounded SEQ_SPINS pauses for a
 * writer to leave. An odd seq (w & SEQ_ONE) on return means the writer is still inside. */
static inline uint64_t seq_read_begin(const struct bucket *b)
{
    uint64_t w = __atomic_load_n(&b->word, __ATOMIC_ACQUIRE);
    for (int i = 0; (w & SEQ_ONE) && i < SEQ_SPINS; i++) {
        cpu_relax();
        w = __atomic_load_n(&b->word, __ATOMIC_ACQUIRE);
    }
    return w;
}

/* Reader: nonzero when a writer entered the bucket, or a failed writer fenced it, since
 * seq_read_begin returned w. The same one load as a plain seqlock's re-check. */
static inline int seq_read_changed(const struct bucket *b, uint64_t w)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&b->word, __ATOMIC_RELAXED) != w;
}

/* Writer (shard lock held). An odd seq left by a dead writer is entered as is. Read-modify-
 * writes, so a fence bit set meanwhile by a writer without the lock is never lost. */
static inline void seq_write_begin(struct bucket *b)
{
    __atomic_fetch_or(&b->word, SEQ_ONE, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void seq_write_end(struct bucket *b)
{
    __atomic_fetch_add(&b->word, SEQ_ONE, __ATOMIC_RELEASE); /* odd to even; a carry leaves the word */
}

static inline uint64_t slot_load(const struct bucket *b, int i)
{
    return __atomic_load_n(&b->slot[i], __ATOMIC_RELAXED);
}

static inline void slot_store(struct bucket *b, int i, uint64_t w)
{
    __atomic_store_n(&b->slot[i], w, __ATOMIC_RELAXED);
}

/* Writer: point slot i at w (0 = empty) inside the bucket's odd window. */
static void slot_publish(struct bucket *b, int i, uint64_t w)
{
    seq_write_begin(b);
    slot_store(b, i, w);
    seq_write_end(b);
}

/* ------------------------------------------------------------------------------------------ */
/* Fences: a write that could not take its shard lock                                         */
/* ------------------------------------------------------------------------------------------ */

/* The bit of a bucket's fence mask that covers keys with this tag (1 in 32 of the bucket's
 * other keys share it). */
static inline uint64_t fence_bit(uint32_t tag) { return 1ULL << (tag & 31u); }

/*
 * Without the lock: note in ctl's fence log that bucket (of ctl's shard) carries a fence, so
 * the next holder visits it rather than every bucket of the shard. An entry is claimed with a
 * compare-and-swap from 0 (free), so it is never half written; a bucket already noted is not
 * noted twice (a holder that takes its entry after we saw it reads the bucket's word after
 * that too, and sees our bit). With every entry taken, fence_overflow sends the next holder to
 * a full scan.
 * Bound: FENCE_LOG entries.
 */
static void fence_log_add(struct shard_ctl *ctl, uint32_t bucket)
{
    uint32_t want = bucket + 1;
    for (int i = 0; i < FENCE_LOG; i++) {
        uint32_t v = __atomic_load_n(&ctl->fence_log[i], __ATOMIC_SEQ_CST);
        if (v == 0 && __atomic_compare_exchange_n(&ctl->fence_log[i], &v, want, 0, __ATOMIC_SEQ_CST,
                                                  __ATOMIC_SEQ_CST))
            return;
        if (v == want) return;
    }
    __atomic_store_n(&ctl->fence_overflow, 1u, __ATOMIC_SEQ_CST);
}

/*
 * Without the lock: make k's key read as a miss until the shard's next lock holder has dropped
 * its items (shard_unfence). The bit is set first, the bucket noted in the fence log second and
 * the fence counted third, all sequentially consistent, so a holder that sees the count also
 * sees the note and the bit. Returns nonzero when the bit was already set (the key read as a
 * miss already). No reader that validates after the bit is set returns the old value, even one
 * that began before it (it sees the word changed and misses); one that validated before the
 * bit was set may still return it.
 */
#ifdef STRATA_TEST_HOOKS
int strata_test_fence_dies_after_bit; /* nonzero: bucket_fence stops after the bit, as if killed */
#endif

static int bucket_fence(strata_table *t, const keyref *k)
{
    struct shard_ctl *ctl = ctl_of(t, k->shard);
    uint64_t bit = fence_bit(k->tag);
    uint64_t old = __atomic_fetch_or(&bucket_of(t, k->shard, k->bucket)->word, bit, __ATOMIC_SEQ_CST);
#ifdef STRATA_TEST_HOOKS
    if (strata_test_fence_dies_after_bit) return (old & bit) != 0;
#endif
    fence_log_add(ctl, k->bucket);
    __atomic_fetch_add(&ctl->fenced, 1u, __ATOMIC_SEQ_CST);
    return (old & bit) != 0;
}

/* Lock held: in bucket b, unlink every item whose tag has a fence bit set and clear those bits,
 * in one seq window, so no reader sees the item unfenced. One load when b has no fence. */
static void bucket_unfence(struct bucket *b)
{
    uint64_t mask = __atomic_load_n(&b->word, __ATOMIC_SEQ_CST) & FENCE_MASK;
    if (mask == 0) return;
    seq_write_begin(b);
    /* Bound: 7 slots. */
    for (int j = 0; j < STRATA_SLOTS_PER_BUCKET; j++) {
        uint64_t w = slot_load(b, j);
        if (slot_loc(w) != 0 && (fence_bit(slot_tag(w)) & mask)) slot_store(b, j, 0);
    }
    __atomic_fetch_and(&b->word, ~mask, __ATOMIC_RELAXED);
    seq_write_end(b);
}

#ifdef STRATA_TEST_HOOKS
uint64_t strata_test_unfence_full_scans; /* shard_unfence's scans of every bucket */
#endif

/*
 * Lock held: clear shard s's fences. The count is loaded first, then the fence log and overflow
 * flag are taken (each entry swapped for 0): every fence counted had noted its bucket before,
 * so the buckets noted cover every counted fence, and each is unfenced. A full scan only when
 * the log overflowed (more than FENCE_LOG buckets fenced since the last holder, or a clear that
 * fenced the whole shard) or holds a bucket out of range (damage). The holder then subtracts
 * the count it loaded: fences that land meanwhile keep their bits, notes and counts for the
 * next holder. O(FENCE_LOG) when at most FENCE_LOG buckets were fenced, O(buckets) after more;
 * one load when there is no fence.
 */
static void shard_unfence(strata_table *t, uint32_t s)
{
    struct shard_ctl *ctl = ctl_of(t, s);
    uint64_t pending = __atomic_load_n(&ctl->fenced, __ATOMIC_SEQ_CST);
    int scan_all;

    if (pending == 0) return;
    scan_all = __atomic_exchange_n(&ctl->fence_overflow, 0u, __ATOMIC_SEQ_CST) != 0;
    /* Bound: FENCE_LOG entries. */
    for (int i = 0; i < FENCE_LOG; i++) {
        uint32_t v = __atomic_exchange_n(&ctl->fence_log[i], 0u, __ATOMIC_SEQ_CST);
        if (v == 0 || scan_all) continue;
        if (v > t->geo.buckets_per_shard)
            scan_all = 1;
        else
            bucket_unfence(bucket_of(t, s, v - 1));
    }
    if (scan_all) {
#ifdef STRATA_TEST_HOOKS
        __atomic_fetch_add(&strata_test_unfence_full_scans, 1, __ATOMIC_RELAXED);
#endif
        /* Bound: buckets_per_shard buckets. */
        for (uint32_t i = 0; i < t->geo.buckets_per_shard; i++) bucket_unfence(bucket_of(t, s, i));
    }
    __atomic_fetch_sub(&ctl->fenced, pending, __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------------------------------------ */
/* Reader                                                                                     */
/* ------------------------------------------------------------------------------------------ */

enum read_outcome { READ_MISS, READ_HIT, READ_EXPIRED, READ_BAD };

char strata_sink_have_[1];

strata_status strata_get(strata_table *t, const void *key, size_t key_len, const strata_sink *sink,
                         uint64_t *cas_out)
{
    uint64_t now = 0;
    return strata_get_at(t, key, key_len, sink, cas_out, &now);
}

uint64_t strata_key_hash(const strata_table *t, const void *key, size_t key_len)
{
    return strata_hash64(key, key_len, t->seed);
}

/* strata_get_at's lookup of key, located by k (key_len checked by the caller). A k that is not
 * key's finds no item of key: a slot whose tag and key match by chance fails its checksum,
 * which k.hash seeds. Inlined into both callers, so that the plain get pays no call for the
 * hashed one's sake. */
static inline __attribute__((always_inline)) strata_status
get_located(strata_table *t, const void *key, size_t key_len, keyref k, const strata_sink *sink, uint64_t *cas_out,
            uint64_t *now)
{
    struct bucket *b;
    uint64_t fenced;

    b = bucket_of(t, k.shard, k.bucket);
    fenced = fence_bit(k.tag);

    /* Bound: READ_ATTEMPTS tries of at most 7 slots and one value copy each. */
    for (int attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
        enum read_outcome outcome = READ_MISS;
        struct item_hdr h;
        uint64_t seen = 0, ext;
        int at = -1;
        uint64_t seq = seq_read_begin(b);

        if (seq & SEQ_ONE) continue;
        if (seq & fenced) { /* a failed writer fenced the key: a miss until unfenced */
            COUNT(t, misses);
            return STRATA_NOT_FOUND;
        }
        for (int i = 0; i < STRATA_SLOTS_PER_BUCKET; i++) {
            uint64_t w = slot_load(b, i);
            const uint8_t *p;
            void *buf;

            if (slot_loc(w) == 0 || slot_tag(w) != k.tag) continue;
            p = item_at(t, k.shard, slot_loc(w), &h, &ext);
            if (p == NULL || h.key_len != key_len || memcmp(p + ITEM_HDR, key, key_len) != 0) continue;
            seen = w;
            at = i;
            if (item_dead(t, &h, now)) {
                outcome = READ_EXPIRED;
                break;
            }
            buf = sink->reserve(sink->ctx, h.value_len, ((uint64_t)h.checksum << 32) | h.cas);
            if (buf == NULL) return STRATA_ENOMEM;
            if (buf == STRATA_SINK_HAVE) { /* validated when the caller copied it */
                outcome = READ_HIT;
                break;
            }
            /* The copy and its check in one pass: the checksum is of the bytes in buf. */
            outcome = item_checksum_copy(k.hash, &h, buf, p + ITEM_HDR + key_len) == h.checksum ? READ_HIT : READ_BAD;
            break;
        }
        if (seq_read_changed(b, seq)) continue;

        switch (outcome) {
        case READ_HIT:
            /* The one shared write a reader makes, and only when the bit is clear. */
            if (!(seen & SLOT_REF))
                __atomic_compare_exchange_n(&b->slot[at], &seen, seen | SLOT_REF, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED);
            if (cas_out) *cas_out = h.cas;
            COUNT(t, hits);
            return STRATA_OK;
        case READ_EXPIRED:
            COUNT(t, expired);
            break;
        case READ_BAD: /* stable but wrong: damaged bytes; a retry would read the same */
            COUNT(t, torn_reads);
            break;
        case READ_MISS:
            break;
        }
        COUNT(t, misses);
        return STRATA_NOT_FOUND;
    }
    COUNT(t, torn_reads);
    COUNT(t, misses);
    return STRATA_NOT_FOUND;
}

strata_status strata_get_at(strata_table *t, const void *key, size_t key_len, const strata_sink *sink,
                            uint64_t *cas_out, uint64_t *now)
{
    if (key_len == 0 || key_len > STRATA_MAX_KEY) return STRATA_EINVAL;
    return get_located(t, key, key_len, locate(t, key, key_len), sink, cas_out, now);
}

strata_status strata_get_hashed(strata_table *t, const void *key, size_t key_len, uint64_t hash,
                                const strata_sink *sink, uint64_t *cas_out, uint64_t *now)
{
    if (key_len == 0 || key_len > STRATA_MAX_KEY) return STRATA_EINVAL;
    return get_located(t, key, key_len, locate_hash(t, hash), sink, cas_out, now);
}

/* ------------------------------------------------------------------------------------------ */
/* Writer internals (the shard lock is held in every function of this section)                */
/* ------------------------------------------------------------------------------------------ */

/*
 * Where a writer appends: the active segment and its fill. shard_check copies both from shared
 * memory once and validates them; from then on the writer reads only this copy (and stores
 * the fill it makes, and the segment it rotates to), so a process scribbling over the shared
 * fields meanwhile cannot send a write outside the segment. Invariant: active < segments_per_shard; fill is 0 (unused) or a multiple of 8 in
 * SEG_HDR..segment_size.
 */
typedef struct cursor {
    uint32_t active;
    uint32_t fill;
} cursor;

/* Forget everything in shard s: every slot cleared and every fence lifted inside a seq window
 * (leaving every seq even, also one a dead writer left odd), every segment unused. Fences set
 * while it runs keep their count (see shard_unfence). O(buckets + segments). Also the
 * owner-died recovery, so it trusts nothing in the shard. */
static void shard_drop(strata_table *t, uint32_t s)
{
    struct shard_ctl *ctl = ctl_of(t, s);
    uint64_t pending = __atomic_load_n(&ctl->fenced, __ATOMIC_SEQ_CST);

    /* The notes go before the bits they cover: every bucket is cleared below. */
    __atomic_store_n(&ctl->fence_overflow, 0u, __ATOMIC_SEQ_CST);
    /* Bound: FENCE_LOG entries. */
    for (int i = 0; i < FENCE_LOG; i++) __atomic_store_n(&ctl->fence_log[i], 0u, __ATOMIC_SEQ_CST);
    /* Bound: buckets_per_shard iterations of 7 stores. */
    for (uint32_t i = 0; i < t->geo.buckets_per_shard; i++) {
        struct bucket *b = bucket_of(t, s, i);
        seq_write_begin(b);
        for (int j = 0; j < STRATA_SLOTS_PER_BUCKET; j++) slot_store(b, j, 0);
        __atomic_fetch_and(&b->word, ~FENCE_MASK, __ATOMIC_RELAXED);
        seq_write_end(b);
    }
    __atomic_fetch_sub(&ctl->fenced, pending, __ATOMIC_SEQ_CST);
    /* Bound: segments_per_shard iterations. */
    for (uint32_t i = 0; i < t->geo.segments_per_shard; i++) {
        seg_of(t, s, i)->fill = 0;
        __atomic_store_n(&seg_of(t, s, i)->started_ms, 0, __ATOMIC_RELAXED);
    }
    ctl->active = 0;
    if (ctl->next_cas == 0) ctl->next_cas = 1;
    ctl->drops++;
}

struct recover_ctx {
    strata_table *t;
    uint32_t shard;
};

/* strata_lock_recover_fn: the previous holder of the shard lock died mid-write. */
static void shard_recover(void *ctx)
{
    struct recover_ctx *rc = ctx;
    shard_drop(rc->t, rc->shard);
}

/* Copy the active segment and its fill into *c, each read once, and validate the copies; a
 * garbled control block or segment header drops the shard (then *c is segment 0, unused). */
static void shard_check(strata_table *t, uint32_t s, cursor *c)
{
    struct shard_ctl *ctl = ctl_of(t, s);
    uint32_t active = __atomic_load_n(&ctl->active, __ATOMIC_RELAXED), fill;

    if (active < t->geo.segments_per_shard) {
        fill = __atomic_load_n(&seg_of(t, s, active)->fill, __ATOMIC_RELAXED);
        if (fill == 0 || (fill >= SEG_HDR && fill <= t->geo.segment_size && fill % 8 == 0)) {
            c->active = active;
            c->fill = fill;
            return;
        }
    }
    shard_drop(t, s);
    c->active = 0;
    c->fill = 0;
}

static uint32_t next_cas(struct shard_ctl *ctl)
{
    uint32_t cas = ctl->next_cas++;
    if (cas == 0) cas = ctl->next_cas++;
    return cas;
}

/* Index of the slot in b that points at loc, or -1. */
static int slot_pointing_at(const struct bucket *b, uint32_t loc)
{
    /* Bound: 7 slots. */
    for (int i = 0; i < STRATA_SLOTS_PER_BUCKET; i++)
        if (slot_loc(slot_load(b, i)) == loc) return i;
    return -1;
}

/* Index of the slot in b holding key, or -1; its header in *h and item in *item. */
static int slot_find(const strata_table *t, const keyref *k, const struct bucket *b, const void *key,
                     size_t key_len, struct item_hdr *h, const uint8_t **item)
{
    /* Bound: 7 slots, one key compare each. */
    for (int i = 0; i < STRATA_SLOTS_PER_BUCKET; i++) {
        uint64_t w = slot_load(b, i), ext;
        const uint8_t *p;
        if (slot_loc(w) == 0 || slot_tag(w) != k->tag) continue;
        p = item_at(t, k->shard, slot_loc(w), h, &ext);
        if (p && h->key_len == key_len && memcmp(p + ITEM_HDR, key, key_len) == 0) {
            *item = p;
            return i;
        }
    }
    return -1;
}

/*
 * The slot a new key should take in b: an empty one, else one whose item is gone or expired,
 * else the one whose item is oldest (distance behind the write head), preferring a clear ref bit.
 * *evicts is set when the chosen slot holds a live item (counted as an eviction).
 */
static int slot_choose(const strata_table *t, uint32_t s, const cursor *c, const struct bucket *b,
                       uint64_t *now, int *evicts)
{
    uint64_t seg_size = t->geo.segment_size, nseg = t->geo.segments_per_shard;
    uint64_t best_score = 0;
    int best = 0;

    *evicts = 0;
    /* Bound: 7 slots, one header read each. */
    for (int i = 0; i < STRATA_SLOTS_PER_BUCKET; i++) {
        uint64_t w = slot_load(b, i), ext, score;
        struct item_hdr h;
        uint64_t off, seg;

        if (slot_loc(w) == 0) return i;
        if (item_at(t, s, slot_loc(w), &h, &ext) == NULL || item_dead(t, &h, now)) return i;
        off = (uint64_t)(slot_loc(w) - 1) * 8;
        seg = off / seg_size;
        score = ((c->active + nseg - seg) % nseg) * seg_size + (seg_size - off % seg_size);
        if (!(w & SLOT_REF)) score += t->shard_data_bytes;
        if (score > best_score) {
            best_score = score;
            best = i;
        }
    }
    *evicts = 1;
    return best;
}

/*
 * Compact segment seg of shard s in place so that need bytes fit after it: items still indexed,
 * unexpired and referenced are moved down (ref cleared) while they fit the copy budget; every
 * other indexed item is unlinked. Returns the segment's new fill (fill + need <= segment_size),
 * or 0 if the segment's bytes are not a valid item log (the caller then drops the shard).
 * Bound: fill / 32 iterations, each one key hash, 7 slot reads and at most one memmove.
 */
static uint32_t segment_compact(strata_table *t, uint32_t s, uint32_t seg, uint64_t need)
{
    struct seg_hdr *sh = seg_of(t, s, seg);
    uint8_t *base = (uint8_t *)sh;
    uint64_t seg_off = (uint64_t)seg * t->geo.segment_size;
    uint64_t fill = __atomic_load_n(&sh->fill, __ATOMIC_RELAXED), budget = t->geo.segment_size - SEG_HDR - need;
    uint64_t rd = SEG_HDR, wr = SEG_HDR, now = 0;

    if (fill == 0) {
        sh->fill = SEG_HDR;
        return SEG_HDR;
    }
    if (fill < SEG_HDR || fill > t->geo.segment_size || fill % 8 != 0) return 0;
    while (rd < fill) {
        struct item_hdr h;
        uint64_t ext;
        uint32_t loc = loc_for(seg_off + rd);
        const uint8_t *p = item_at(t, s, loc, &h, &ext);
        keyref k;
        struct bucket *b;
        int i;

        if (p == NULL || rd + ext > fill) return 0;
        k = locate(t, p + ITEM_HDR, h.key_len);
        b = bucket_of(t, s, k.bucket);
        i = k.shard == s ? slot_pointing_at(b, loc) : -1;
        if (i >= 0) {
            uint64_t w = slot_load(b, i);
            if (item_dead(t, &h, &now)) {
                slot_publish(b, i, 0);
                COUNT(t, expired);
            } else if ((w & SLOT_REF) && (wr - SEG_HDR) + ext <= budget) {
                if (wr != rd) {
                    seq_write_begin(b);
                    memmove(base + wr, p, ext);
                    slot_store(b, i, make_slot(loc_for(seg_off + wr), slot_tag(w)));
                    seq_write_end(b);
                } else {
                    __atomic_fetch_and(&b->slot[i], ~SLOT_REF, __ATOMIC_RELAXED);
                }
                wr += ext;
            } else {
                slot_publish(b, i, 0);
                COUNT(t, evictions);
                COUNT_HOST(t, STRATA_ROW_L1, STRATA_TC_EVICTIONS);
            }
        }
        rd += ext;
    }
    sh->fill = (uint32_t)wr;
    return (uint32_t)wr;
}

/* Note that the writer begins appending to segment seg of shard s now (table.h: a segment's
 * start). Readers only ever report it, so a relaxed store (a plain mov) is enough. */
static void segment_start(strata_table *t, uint32_t s, uint32_t seg)
{
    __atomic_store_n(&seg_of(t, s, seg)->started_ms, now_ms(), __ATOMIC_RELAXED);
}

/* Make room for need bytes at the cursor, rotating to the next segment if the active one is
 * full. On return c->fill + need <= segment_size. */
static void ensure_space(strata_table *t, uint32_t s, cursor *c, uint64_t need)
{
    struct shard_ctl *ctl = ctl_of(t, s);
    uint32_t next, fill;

    if (c->fill == 0) {
        c->fill = SEG_HDR;
        segment_start(t, s, c->active);
    }
    if (c->fill + need <= t->geo.segment_size) return;
    next = (c->active + 1) % t->geo.segments_per_shard;
    fill = segment_compact(t, s, next, need);
    if (fill == 0) {
        shard_drop(t, s);
        c->active = 0;
        c->fill = SEG_HDR;
        segment_start(t, s, 0);
        return;
    }
    segment_start(t, s, next);
    ctl->active = next;
    ctl->rotations++;
    c->active = next;
    c->fill = fill;
}

/* Write an item whose value is head followed by value at the cursor (ensure_space made room
 * for it), advance the cursor, store the new fill and return the item's loc. The bytes are
 * fresh: no slot points there, and only the lock holder writes them. The value is copied and
 * checksummed in one pass over the caller's head and value (item_checksum_copy_parts), which
 * are the writer's own and do not change during strata_write (its contract in table.h), so the
 * checksum equals one over the bytes as stored; the table's bytes are not read back. */
static uint32_t item_append(strata_table *t, uint32_t s, cursor *c, const keyref *k, const void *key,
                            size_t key_len, const void *head, size_t head_len, const void *value,
                            size_t value_len, uint64_t expires_ms, uint8_t flags)
{
    struct seg_hdr *sh = seg_of(t, s, c->active);
    uint32_t at = c->fill;
    uint8_t *p = (uint8_t *)sh + at;
    uint8_t *v = p + ITEM_HDR + key_len;
    uint64_t total = ITEM_HDR + key_len + head_len + value_len, ext = align8(total);
    struct item_hdr h = {0};

    h.value_len = (uint32_t)(head_len + value_len);
    h.expires_ms = expires_ms;
    h.cas = next_cas(ctl_of(t, s));
    h.key_len = (uint16_t)key_len;
    h.flags = flags;
    memcpy(p + ITEM_HDR, key, key_len);
    h.checksum = item_checksum_copy_parts(k->hash, &h, v, head, head_len, value);
    memset(p + total, 0, ext - total);
    memcpy(p, &h, sizeof h);
    c->fill = at + (uint32_t)ext;
    sh->fill = c->fill;
    return loc_for((uint64_t)c->active * t->geo.segment_size + at);
}

static uint64_t expiry_for(uint64_t ttl_ms) { return ttl_ms ? now_ms() + ttl_ms : 0; }

/* Parse an ASCII unsigned decimal of 1..20 digits that fits 64 bits. */
static int parse_u64(const uint8_t *p, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    if (len == 0 || len > 20) return 0;
    /* Bound: 20 digits. */
    for (size_t i = 0; i < len; i++) {
        unsigned d = (unsigned)p[i] - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

static size_t format_u64(uint64_t v, char buf[20])
{
    char tmp[20];
    size_t n = 0, i;
    /* Bound: 20 digits, twice. */
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
    return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Writes                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static strata_status op_store(strata_table *t, const keyref *k, cursor *c, strata_write_req *r)
{
    struct bucket *b = bucket_of(t, k->shard, k->bucket);
    struct item_hdr h;
    const uint8_t *item;
    uint64_t now = 0;
    int i, live, evicts = 0;

    ensure_space(t, k->shard, c, align8(ITEM_HDR + r->key_len + r->head_len + r->value_len));
    i = slot_find(t, k, b, r->key, r->key_len, &h, &item);
    live = i >= 0 && !item_dead(t, &h, &now);
    if (r->op == STRATA_OP_ADD && live) return STRATA_NOT_STORED;
    if (r->op == STRATA_OP_CAS && (!live || h.cas != r->cas)) return STRATA_NOT_STORED;
    if (i < 0) i = slot_choose(t, k->shard, c, b, &now, &evicts);
    if (evicts) {
        COUNT(t, evictions);
        COUNT_HOST(t, STRATA_ROW_L1, STRATA_TC_EVICTIONS);
    }
    slot_publish(b, i, make_slot(item_append(t, k->shard, c, k, r->key, r->key_len, r->head, r->head_len, r->value,
                                             r->value_len, expiry_for(r->ttl_ms),
                                             (uint8_t)(r->flags & STRATA_ITEM_POLLED)),
                                 k->tag));
    COUNT(t, sets);
    return STRATA_OK;
}

static strata_status op_delete(strata_table *t, const keyref *k, strata_write_req *r)
{
    struct bucket *b = bucket_of(t, k->shard, k->bucket);
    struct item_hdr h;
    const uint8_t *item;
    uint64_t now = 0;
    int i = slot_find(t, k, b, r->key, r->key_len, &h, &item);

    if (i < 0) return STRATA_NOT_FOUND;
    slot_publish(b, i, 0);
    if (item_dead(t, &h, &now)) {
        COUNT(t, expired);
        return STRATA_NOT_FOUND;
    }
    COUNT(t, deletes);
    return STRATA_OK;
}

/* memcached semantics: unsigned 64-bit, incr wraps, decr stops at 0, the expiry is kept. */
static strata_status op_counter(strata_table *t, const keyref *k, cursor *c, strata_write_req *r)
{
    struct bucket *b = bucket_of(t, k->shard, k->bucket);
    struct item_hdr h;
    const uint8_t *item;
    uint64_t now = 0, value, expires;
    char digits[20];
    size_t n;
    int i, evicts = 0;

    ensure_space(t, k->shard, c, align8(ITEM_HDR + r->key_len + sizeof digits));
    i = slot_find(t, k, b, r->key, r->key_len, &h, &item);
    if (i < 0 || item_dead(t, &h, &now)) {
        if (!r->has_initial) return STRATA_NOT_FOUND;
        value = r->initial;
        expires = expiry_for(r->ttl_ms);
    } else {
        if (!parse_u64(item + ITEM_HDR + h.key_len, h.value_len, &value)) return STRATA_NOT_NUMBER;
        if (r->op == STRATA_OP_INCR)
            value += r->amount;
        else
            value = value > r->amount ? value - r->amount : 0;
        expires = h.expires_ms;
    }
    if (i < 0) i = slot_choose(t, k->shard, c, b, &now, &evicts);
    if (evicts) {
        COUNT(t, evictions);
        COUNT_HOST(t, STRATA_ROW_L1, STRATA_TC_EVICTIONS);
    }
    n = format_u64(value, digits);
    slot_publish(b, i, make_slot(item_append(t, k->shard, c, k, r->key, r->key_len, NULL, 0, digits, n, expires, 0),
                                 k->tag));
    r->result = value;
    COUNT(t, sets);
    return STRATA_OK;
}

/* Take shard s's lock, recovering it if its owner died, then validate the shard (into *c) and
 * clear the fences failed writers left. */
static strata_status shard_lock(strata_table *t, uint32_t s, int wait, cursor *c)
{
    struct recover_ctx rc = {t, s};
    int recovered = 0;
    strata_status st = strata_lock_acquire(&ctl_of(t, s)->lock, wait, t->lock_timeout_ns, shard_recover,
                                           &rc, &recovered);
    if (recovered) COUNT(t, owner_died_recoveries);
    if (st == STRATA_LOCK_TIMEOUT) COUNT(t, lock_timeouts);
    if (st == STRATA_OK) {
        shard_check(t, s, c);
        shard_unfence(t, s);
    }
    return st;
}

/* Without the lock: does the bucket hold a live item under the key? A lock-free look (item_at
 * bounds every read), for delete's answer only. */
static int key_live_unlocked(strata_table *t, const keyref *k, const void *key, size_t key_len)
{
    struct item_hdr h;
    const uint8_t *item;
    uint64_t now = 0;
    int i = slot_find(t, k, bucket_of(t, k->shard, k->bucket), key, key_len, &h, &item);
    return i >= 0 && !item_dead(t, &h, &now);
}

#ifdef STRATA_TEST_HOOKS
void (*strata_test_after_shard_check)(strata_table *t, uint32_t shard);
#endif

static inline uint8_t *fill_locks_region(const strata_table *t) { return t->base + t->geo.fill_locks_offset; }

strata_status strata_write(strata_table *t, strata_write_req *r, int wait)
{
    keyref k;
    cursor c;
    strata_status st;

    if (r->key_len == 0 || r->key_len > STRATA_MAX_KEY) return STRATA_EINVAL;
    if ((r->op == STRATA_OP_SET || r->op == STRATA_OP_ADD || r->op == STRATA_OP_CAS) &&
        (r->head_len > t->geo.max_value_size || r->value_len > t->geo.max_value_size ||
         (uint64_t)r->key_len + r->head_len + r->value_len > t->geo.max_value_size)) {
        COUNT(t, too_large);
        return STRATA_TOO_LARGE;
    }
    k = locate(t, r->key, r->key_len);
    /* Before the shard lock: a fill that adds under it after this either sees the mark or
     * stored before the change, which then replaces or removes its value. */
    if (r->op == STRATA_OP_SET || r->op == STRATA_OP_DELETE) strata_fill_lock_mark(fill_locks_region(t), k.hash);
    (void)strata_counter_words(t); /* a first claim's scan runs before the lock, not under it */
    st = shard_lock(t, k.shard, wait, &c);
    if (st == STRATA_LOCK_TIMEOUT || st == STRATA_ELOCK) {
        /* The write did not happen: the value the key holds may be stale by now (the caller
         * writes other tiers), so it must read as a miss. A delete has then done its job. */
        int was_fenced = bucket_fence(t, &k);
        if (r->op != STRATA_OP_DELETE) return st;
        return !was_fenced && key_live_unlocked(t, &k, r->key, r->key_len) ? STRATA_OK : STRATA_NOT_FOUND;
    }
    if (st != STRATA_OK) return st;
    /* A fence bit no count covers (its writer died between the bit and the count, or the file
     * was damaged) would hide the bucket's keys for good: the bucket written clears it, dropping
     * what it covers. One load when the bucket has none. */
    bucket_unfence(bucket_of(t, k.shard, k.bucket));
#ifdef STRATA_TEST_HOOKS
    if (strata_test_after_shard_check) strata_test_after_shard_check(t, k.shard);
#endif
    switch (r->op) {
    case STRATA_OP_ADD:
        if (r->fill_token && strata_fill_lock_marked(fill_locks_region(t), k.hash, r->fill_token)) {
            st = STRATA_NOT_STORED;
            break;
        }
        st = op_store(t, &k, &c, r);
        break;
    case STRATA_OP_SET:
    case STRATA_OP_CAS:
        st = op_store(t, &k, &c, r);
        break;
    case STRATA_OP_DELETE:
        st = op_delete(t, &k, r);
        break;
    case STRATA_OP_INCR:
    case STRATA_OP_DECR:
        st = op_counter(t, &k, &c, r);
        break;
    default:
        st = STRATA_EINVAL;
    }
    strata_lock_release(&ctl_of(t, k.shard)->lock);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Maintenance: cleanup, clear, keys, stats                                                   */
/* ------------------------------------------------------------------------------------------ */

strata_status strata_cleanup(strata_table *t, uint64_t *removed)
{
    strata_status result = STRATA_OK;
    uint64_t count = 0, now = now_ms();

    /* Bound: shards x buckets_per_shard x 7 slots, one header read each. */
    for (uint32_t s = 0; s < t->geo.shards; s++) {
        cursor c;
        strata_status st = shard_lock(t, s, 1, &c);
        if (st != STRATA_OK) {
            result = st;
            continue;
        }
        for (uint32_t i = 0; i < t->geo.buckets_per_shard; i++) {
            struct bucket *b = bucket_of(t, s, i);
            for (int j = 0; j < STRATA_SLOTS_PER_BUCKET; j++) {
                uint64_t w = slot_load(b, j), ext;
                struct item_hdr h;
                if (slot_loc(w) == 0) continue;
                if (item_at(t, s, slot_loc(w), &h, &ext) == NULL) {
                    slot_publish(b, j, 0); /* points at nothing valid */
                } else if (item_dead(t, &h, &now)) {
                    slot_publish(b, j, 0);
                    count++;
                }
            }
        }
        strata_lock_release(&ctl_of(t, s)->lock);
    }
    count_add(&t->proc->c.expired, count);
    if (removed) *removed = count;
    return result;
}

strata_status strata_clear(strata_table *t)
{
    strata_status result = STRATA_OK;
    /* Bound: shards iterations of one shard_drop or one fence per bucket. */
    for (uint32_t s = 0; s < t->geo.shards; s++) {
        cursor c;
        strata_status st = shard_lock(t, s, 1, &c);
        if (st == STRATA_LOCK_TIMEOUT || st == STRATA_ELOCK) {
            /* Fence every key of the shard: it reads as empty, and its next lock holder drops
             * what is there (as bucket_fence, for all 32 bits of every bucket). */
            for (uint32_t i = 0; i < t->geo.buckets_per_shard; i++)
                __atomic_fetch_or(&bucket_of(t, s, i)->word, FENCE_MASK, __ATOMIC_SEQ_CST);
            __atomic_store_n(&ctl_of(t, s)->fence_overflow, 1u, __ATOMIC_SEQ_CST); /* no log: scan all */
            __atomic_fetch_add(&ctl_of(t, s)->fenced, 1u, __ATOMIC_SEQ_CST);
            continue;
        }
        if (st != STRATA_OK) {
            result = st;
            continue;
        }
        shard_drop(t, s);
        strata_lock_release(&ctl_of(t, s)->lock);
    }
    return result;
}

void strata_keys(strata_table *t, void (*each)(void *ctx, const void *key, size_t len), void *ctx)
{
    uint8_t keys[STRATA_SLOTS_PER_BUCKET][STRATA_MAX_KEY];
    size_t lens[STRATA_SLOTS_PER_BUCKET];
    uint64_t now = now_ms();

    /* Bound: shards x buckets x READ_ATTEMPTS x 7 slots; a bucket that keeps changing is
     * skipped after READ_ATTEMPTS tries. */
    for (uint32_t s = 0; s < t->geo.shards; s++) {
        for (uint32_t i = 0; i < t->geo.buckets_per_shard; i++) {
            const struct bucket *b = bucket_of(t, s, i);
            for (int attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
                uint64_t seq = seq_read_begin(b);
                int n = 0;
                if (seq & SEQ_ONE) continue;
                for (int j = 0; j < STRATA_SLOTS_PER_BUCKET; j++) {
                    uint64_t w = slot_load(b, j), ext;
                    struct item_hdr h;
                    const uint8_t *p = item_at(t, s, slot_loc(w), &h, &ext);
                    keyref k;
                    if (p == NULL || (seq & fence_bit(slot_tag(w))) || item_dead(t, &h, &now)) continue;
                    /* As strata_get would: the key belongs where it was found (shard, bucket,
                     * tag) and the item's checksum holds, so damaged bytes are no key. */
                    memcpy(keys[n], p + ITEM_HDR, h.key_len);
                    k = locate(t, keys[n], h.key_len);
                    if (k.shard != s || k.bucket != i || k.tag != slot_tag(w)) continue;
                    if (item_checksum(k.hash, &h, p + ITEM_HDR + h.key_len) != h.checksum) continue;
                    lens[n++] = h.key_len;
                }
                if (seq_read_changed(b, seq)) continue;
                for (int j = 0; j < n; j++) each(ctx, keys[j], lens[j]);
                break;
            }
        }
    }
}

/* The counters of this process. In a forked child the page reads as zeros (MADV_WIPEONFORK,
 * pid 0): its counts since the fork are kept. Where the kernel can't wipe, the parent's pid is
 * still there and the counters restart at the child's first stats call. */
static strata_counters *counters_of(strata_table *t)
{
    pid_t pid = getpid();
    if (t->proc->pid != pid) {
        if (t->proc->pid != 0) memset(&t->proc->c, 0, sizeof t->proc->c);
        t->proc->pid = pid;
    }
    return &t->proc->c;
}

void strata_stats_get(strata_table *t, strata_stats *out)
{
    uint64_t now = now_ms(), entries = 0;

    out->counters = *counters_of(t);
    out->geometry = t->geo;
    /* Bound: every slot once, one header read each. Approximate under concurrent writes. */
    for (uint32_t s = 0; s < t->geo.shards; s++) {
        for (uint32_t i = 0; i < t->geo.buckets_per_shard; i++) {
            const struct bucket *b = bucket_of(t, s, i);
            uint64_t fences = __atomic_load_n(&b->word, __ATOMIC_RELAXED);
            for (int j = 0; j < STRATA_SLOTS_PER_BUCKET; j++) {
                uint64_t w = slot_load(b, j), ext;
                struct item_hdr h;
                if (item_at(t, s, slot_loc(w), &h, &ext) && !(fences & fence_bit(slot_tag(w))) &&
                    !item_dead(t, &h, &now))
                    entries++;
            }
        }
    }
    out->entries = entries;
}

uint64_t strata_segments_get(strata_table *t, uint32_t shard, strata_segment *out)
{
    uint32_t n = t->geo.segments_per_shard, size = t->geo.segment_size;
    uint64_t now;

    if (shard >= t->geo.shards) return 0;
    /* Bound: segments_per_shard iterations, two loads each. */
    for (uint32_t i = 0; i < n; i++) {
        const struct seg_hdr *sh = seg_of(t, shard, i);
        uint32_t fill = __atomic_load_n(&sh->fill, __ATOMIC_RELAXED);
        out[i].fill = fill >= SEG_HDR && fill <= size && fill % 8 == 0 ? fill : 0;
        out[i].started_ms = out[i].fill ? __atomic_load_n(&sh->started_ms, __ATOMIC_RELAXED) : 0;
    }
    /* Read after the copies: a start the writer stored (after reading the clock) and that was
     * copied above is not later than this, unless the clock was set back meanwhile. */
    now = now_ms();
    /* Bound: segments_per_shard iterations. */
    for (uint32_t i = 0; i < n; i++)
        if (out[i].started_ms > now || out[i].started_ms < t->created_ms) out[i].started_ms = 0;
    return now;
}

/* ------------------------------------------------------------------------------------------ */
/* The host's counters (counters.h)                                                           */
/* ------------------------------------------------------------------------------------------ */

static inline uint8_t *counters_region(const strata_table *t) { return t->base + t->geo.counters_offset; }

/* The first count of this process through t: claim a slot (or fall back to the handle's private
 * words). Two threads may race here; the loser gives its slot back. */
static uint64_t *counters_claim(strata_table *t)
{
    uint32_t slot = 0;
    uint64_t *expected = NULL;
    uint64_t *words = strata_counter_claim(counters_region(t), getpid(), &slot);

    if (words == NULL) words = t->proc->unslotted;
    if (__atomic_compare_exchange_n(&t->proc->words, &expected, words, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        if (words != t->proc->unslotted) __atomic_store_n(&t->proc->slot, slot + 1, __ATOMIC_RELEASE);
        return words;
    }
    if (words != t->proc->unslotted) strata_counter_release(counters_region(t), slot, getpid());
    return expected;
}

static uint64_t polled_until_load(const strata_table *t) { return strata_polled_until(counters_region(t)); }

uint64_t strata_polled_until_get(const strata_table *t) { return polled_until_load(t); }

void strata_polled_until_put(strata_table *t, uint64_t until_ms) { strata_polled_until_set(counters_region(t), until_ms); }

/* ------------------------------------------------------------------------------------------ */
/* The host's fill locks (fill_locks.h)                                                       */
/* ------------------------------------------------------------------------------------------ */

/* ms since the file was built (the fill locks' clock); 0 when the clock reads earlier. */
static uint64_t since_created(const strata_table *t)
{
    uint64_t now = now_ms();
    return now > t->created_ms ? now - t->created_ms : 0;
}

strata_fill_lock_answer strata_fill_lock(strata_table *t, const void *key, size_t key_len, uint64_t ttl_ms,
                                         uint64_t *token)
{
    strata_fill_lock_answer answer =
        strata_fill_lock_take(fill_locks_region(t), strata_key_hash(t, key, key_len), since_created(t), ttl_ms, token);
    if (answer == STRATA_FILL_LOCK_OTHER) COUNT(t, fill_lock_collisions);
    return answer;
}

int strata_fill_unlock(strata_table *t, const void *key, size_t key_len, uint64_t token)
{
    return strata_fill_lock_give(fill_locks_region(t), strata_key_hash(t, key, key_len), token);
}

uint64_t *strata_counter_words(strata_table *t)
{
    uint64_t *words = __atomic_load_n(&t->proc->words, __ATOMIC_ACQUIRE);
    return words ? words : counters_claim(t);
}

void strata_counter_totals_get(strata_table *t, strata_counter_totals *out)
{
    strata_counter_sum(counters_region(t), out);
}

uint32_t strata_shard_for(const strata_table *t, const void *key, size_t key_len)
{
    return locate(t, key, key_len).shard;
}

strata_status strata_lock_shard(strata_table *t, uint32_t shard, int wait)
{
    strata_status st;
    cursor c;
    if (shard >= t->geo.shards) return STRATA_EINVAL;
    st = shard_lock(t, shard, wait, &c);
    if (st == STRATA_OK) __atomic_add_fetch(&t->held_locks, 1, __ATOMIC_RELAXED);
    return st;
}

strata_status strata_unlock_shard(strata_table *t, uint32_t shard)
{
    strata_status st;
    if (shard >= t->geo.shards) return STRATA_EINVAL;
    st = strata_lock_release(&ctl_of(t, shard)->lock);
    if (st == STRATA_OK) __atomic_sub_fetch(&t->held_locks, 1, __ATOMIC_RELAXED);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Open, build, validate, close                                                               */
/* ------------------------------------------------------------------------------------------ */

#ifdef STRATA_TEST_HOOKS
const char *strata_test_boot_id_path = "/proc/sys/kernel/random/boot_id";
#define BOOT_ID_PATH strata_test_boot_id_path
#else
#define BOOT_ID_PATH "/proc/sys/kernel/random/boot_id"
#endif

/* This boot's id (/proc/sys/kernel/random/boot_id, hashed), or 0 where there is none (no /proc
 * in a chroot or sandbox). A robust mutex held when the machine went down is never marked
 * owner-dead: a file built under another boot may hold a lock nobody can take, so file_validate
 * sends it to a rebuild. 0 means "unknown" (boot_id_differs). */
static uint64_t boot_id_now(void)
{
    char text[64];
    ssize_t n = 0;
    int fd = open(BOOT_ID_PATH, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    n = read(fd, text, sizeof text);
    close(fd);
    return n > 0 ? strata_hash64(text, (size_t)n, MAGIC) : 0;
}

/* Whether a file built under boot id built is from another boot than now's. An id of 0 on
 * either side is unknown and accepted: a process that can't read its boot id (or a file built
 * by one) would otherwise rebuild the file at every open of a process that can, and back,
 * for ever. The cost is that such a file is not sent to a rebuild after a reboot: on tmpfs,
 * the usual home, a reboot removes it anyway. */
static int boot_id_differs(uint64_t built, uint64_t now)
{
    return built != 0 && now != 0 && built != now;
}

static uint64_t header_check(const struct file_header *h)
{
    struct file_header copy = *h;
    copy.state = 0;
    copy.check = 0;
    return strata_hash64(&copy, sizeof copy, MAGIC);
}

/* Why an existing file can't be used as is, or NULL if it can. Reads with pread: nothing is
 * mapped before the size is known to be right (mapping past EOF would SIGBUS). Needs no lock: a
 * file is built in place only while it is empty (and then READY is its last store), and rebuilt
 * only into another file renamed over it, so a READY header with the right size and check is
 * complete whoever else is opening. */
static const char *file_validate(int fd, const struct stat *st, const strata_geometry *g)
{
    struct file_header h;

    if ((uint64_t)st->st_size < HEADER_BYTES) return "file is truncated";
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) return "file header is unreadable";
    if (h.magic != MAGIC) return "wrong magic number";
    if (h.version != LAYOUT_VERSION) return "foreign layout version";
    if (h.fingerprint != layout_fingerprint()) return "struct-size fingerprint differs (another build)";
    if (h.state == STATE_RETIRED) return "retired by a rebuild that did not finish";
    if (h.state != STATE_READY) return "initialisation never completed";
    if (h.check != header_check(&h)) return "header checksum mismatch";
    if (boot_id_differs(h.boot_id, boot_id_now()))
        return "built before the last reboot (its shard locks cannot be trusted)";
    if (h.file_size != (uint64_t)st->st_size) return "file is truncated or extended";
    if (h.file_size != g->size || h.shards != g->shards || h.buckets_per_shard != g->buckets_per_shard ||
        h.segments_per_shard != g->segments_per_shard || h.segment_size != g->segment_size ||
        h.ctl_offset != g->ctl_offset || h.index_offset != g->index_offset ||
        h.data_offset != g->data_offset)
        return "geometry differs from the one requested";
    return NULL;
}

/* Whether a non-empty file starts with our magic number: only such a file (or an empty one) is
 * ever rebuilt. Anything else at the path is somebody's data, whatever its name. */
static int file_has_magic(int fd)
{
    uint64_t magic = 0;
    return pread(fd, &magic, sizeof magic, 0) == (ssize_t)sizeof magic && magic == MAGIC;
}

/* posix_fallocate the first size bytes in RESERVE_CHUNK steps, each retried on EINTR (tmpfs
 * on older kernels gives up a whole call on any signal, and a profiler's timer can fire all
 * through a big one; newer kernels stop only for a fatal signal).
 * 0 or the error number. Bound: size / RESERVE_CHUNK steps of at most RESERVE_TRIES calls. */
static int file_reserve(int fd, uint64_t size)
{
    for (uint64_t off = 0; off < size;) {
        uint64_t len = size - off < RESERVE_CHUNK ? size - off : RESERVE_CHUNK;
        int rc, tries = 0;
        do {
            rc = posix_fallocate(fd, (off_t)off, (off_t)len);
        } while (rc == EINTR && ++tries < RESERVE_TRIES);
        if (rc != 0) return rc;
        off += len;
    }
    return 0;
}

/* Size, map and initialise a new file on fd (held under flock, or a private temporary), then
 * mark it READY. *base gets the mapping. The magic number goes in first, so a builder killed at
 * any later point leaves a file the next opener may rebuild; a failed build leaves it empty. */
static strata_status file_build(int fd, const strata_geometry *g, uint8_t **base, int *err)
{
    struct file_header *h, first;
    uint8_t *p;
    int rc;

    if (ftruncate(fd, 0) != 0) goto sys_fail;
    memset(&first, 0, sizeof first);
    first.magic = MAGIC;
    first.version = LAYOUT_VERSION;
    first.state = STATE_INITIALIZING;
    if (pwrite(fd, &first, sizeof first, 0) != (ssize_t)sizeof first) goto sys_fail_empty;
    rc = file_reserve(fd, g->size);
    if (rc == EOPNOTSUPP) { /* no way to reserve here (not glibc, which emulates): size it only */
        if (ftruncate(fd, (off_t)g->size) != 0) goto sys_fail_empty;
    } else if (rc != 0) {
        if (ftruncate(fd, 0) != 0) { /* best effort: give the space back */ }
        if (rc == ENOSPC) return STRATA_ENOSPC;
        errno = rc; /* never a sparse file: it would SIGBUS its users when tmpfs fills up */
        goto sys_fail;
    }
    p = mmap(NULL, g->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) goto sys_fail_empty;

    h = (struct file_header *)p;
    h->magic = MAGIC;
    h->version = LAYOUT_VERSION;
    h->state = STATE_INITIALIZING;
    h->fingerprint = layout_fingerprint();
    h->file_size = g->size;
    h->shards = g->shards;
    h->buckets_per_shard = g->buckets_per_shard;
    h->segments_per_shard = g->segments_per_shard;
    h->segment_size = g->segment_size;
    h->ctl_offset = g->ctl_offset;
    h->index_offset = g->index_offset;
    h->data_offset = g->data_offset;
    h->seed = random_u64();
    h->creator_uid = (uint32_t)geteuid();
    h->creator_pid = (uint32_t)getpid();
    h->created_ms = now_ms();
    h->boot_id = boot_id_now();
    /* Bound: shards iterations. The index and segments are zero already (fresh space). */
    for (uint32_t s = 0; s < g->shards; s++) {
        struct shard_ctl *ctl = (struct shard_ctl *)(p + g->ctl_offset + (size_t)s * CTL_BYTES);
        if (strata_lock_init(&ctl->lock, err) != STRATA_OK) {
            munmap(p, g->size);
            return STRATA_ELOCK;
        }
        ctl->active = 0;
        ctl->next_cas = (uint32_t)random_u64() | 1u; /* tokens from an older file won't match */
    }
    h->check = header_check(h);
    __atomic_store_n(&h->state, STATE_READY, __ATOMIC_RELEASE);
    *base = p;
    return STRATA_OK;

sys_fail_empty:
    if (err) *err = errno;
    if (ftruncate(fd, 0) != 0) { /* best effort, as above */ }
    return STRATA_EIO;
sys_fail:
    if (err) *err = errno;
    return STRATA_EIO;
}

/* Mark the READY file on fd (of size bytes, held under its flock) retired, before a rebuild
 * renames another file over it: every process mapping it sees the mark at its next operation
 * (strata_retired) and opens the new file. Written through a mapping of the header page, with
 * one atomic store, as readers load it; a file that is not READY has no readers to tell. */
static void file_retire(int fd, uint64_t size)
{
    struct file_header *h;

    if (size < HEADER_BYTES) return;
    h = mmap(NULL, HEADER_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) return;
    if (h->magic == MAGIC) {
        uint32_t ready = STATE_READY;
        __atomic_compare_exchange_n(&h->state, &ready, STATE_RETIRED, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    munmap(h, HEADER_BYTES);
}

const uint32_t *strata_state_word(const strata_table *t) { return &((const struct file_header *)t->base)->state; }

int strata_retired(const strata_table *t) { return __atomic_load_n(strata_state_word(t), __ATOMIC_SEQ_CST) == STATE_RETIRED; }

/* Build a fresh file next to name (in dirfd) and rename it over name. Processes mapping the old
 * file keep their mapping of the old inode; the caller has retired it (file_retire) so that
 * they notice. */
static strata_status file_rebuild(int dirfd, const char *name, const strata_geometry *g, uint8_t **base,
                                  int *err)
{
    size_t len = strlen(name);
    char *tmp = malloc(len + 40);
    strata_status st;
    int fd;

    if (tmp == NULL) return STRATA_ENOMEM;
    memcpy(tmp, name, len);
    snprintf(tmp + len, 40, ".tmp-%ld-%08x", (long)getpid(), (unsigned)random_u64());
    fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (err) *err = errno;
        free(tmp);
        return STRATA_EIO;
    }
    st = file_build(fd, g, base, err);
    if (st == STRATA_OK && renameat(dirfd, tmp, dirfd, name) != 0) {
        if (err) *err = errno;
        munmap(*base, g->size);
        st = STRATA_EIO;
    }
    if (st != STRATA_OK) unlinkat(dirfd, tmp, 0);
    close(fd);
    free(tmp);
    return st;
}

/*
 * Remove "<name>.tmp-*" files in dirfd left by rebuilders that were killed before their rename.
 * Called with the flock of the file currently at name held: only that holder ever builds a
 * temporary file for name, so every one found now is stale. Bound: one pass over the directory.
 */
static void file_sweep_temporaries(int dirfd, const char *name)
{
    size_t name_len = strlen(name);
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* fdopendir owns it */
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    struct dirent *e;

    if (d == NULL) {
        if (fd >= 0) close(fd);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, name, name_len) == 0 && strncmp(e->d_name + name_len, ".tmp-", 5) == 0)
            unlinkat(dirfd, e->d_name, 0);
    }
    closedir(d);
}

/* A file we may map: regular, ours, private (no group or other bits), and reachable only by
 * its one name (a second link is a name we do not control, and would survive our rebuild). */
static strata_status file_check_safe(const struct stat *st)
{
    if (!S_ISREG(st->st_mode) || st->st_uid != geteuid() || (st->st_mode & 077) != 0 || st->st_nlink > 1)
        return STRATA_EUNSAFE;
    return STRATA_OK;
}

/*
 * Open path's directory, the one place every later name is looked up (openat, renameat), so a
 * directory swapped or symlinked after the check can't redirect us. It must be ours and writable
 * by nobody else, or anyone could plant, replace or remove the table. The last component must not
 * be a symlink (O_NOFOLLOW); higher components are the caller's choice of path. *name is the
 * file's name within it (a pointer into path).
 */
static strata_status dir_open(const char *path, int *dirfd, const char **name, int *err)
{
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash == NULL ? 1 : slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(dir_len + 1);
    struct stat st;
    int fd;

    if (dir == NULL) return STRATA_ENOMEM;
    memcpy(dir, slash == NULL ? "." : path, dir_len);
    dir[dir_len] = 0;
    *name = slash == NULL ? path : slash + 1;
    fd = **name ? open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (fd < 0) {
        int e = errno;
        /* A symlink fails with ELOOP, or ENOTDIR when O_DIRECTORY is checked first */
        int link = e == ELOOP || (e == ENOTDIR && lstat(dir, &st) == 0 && S_ISLNK(st.st_mode));
        free(dir);
        if (**name == 0) return STRATA_EINVAL;
        if (link) return STRATA_EUNSAFE_DIR;
        if (err) *err = e;
        return STRATA_EIO;
    }
    free(dir);
    if (fstat(fd, &st) != 0) {
        if (err) *err = errno;
        close(fd);
        return STRATA_EIO;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 022) != 0) {
        close(fd);
        return STRATA_EUNSAFE_DIR;
    }
    *dirfd = fd;
    return STRATA_OK;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* flock, waiting until deadline (mono_ms) at most, polling so a stopped builder can't hang us. */
static strata_status file_lock(int fd, uint64_t deadline, int *err)
{
    struct timespec nap = {0, 1000000};
    /* Bound: FLOCK_WAIT_MS of 1 ms naps (the deadline is at most that far). */
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) return STRATA_OK;
        if (errno != EWOULDBLOCK && errno != EINTR) {
            if (err) *err = errno;
            return STRATA_EIO;
        }
        if (mono_ms() >= deadline) return STRATA_EFLOCK;
        nanosleep(&nap, NULL);
    }
}

#ifdef STRATA_TEST_HOOKS
uint64_t strata_test_min_lock_timeout_ns = STRATA_MIN_LOCK_TIMEOUT_NS; /* a test may raise it */
#define MIN_LOCK_TIMEOUT_NS strata_test_min_lock_timeout_ns
#else
#define MIN_LOCK_TIMEOUT_NS STRATA_MIN_LOCK_TIMEOUT_NS
#endif

static strata_table *table_new(uint8_t *base, const strata_geometry *g, uint64_t lock_timeout_ns)
{
    const struct file_header *h = (const struct file_header *)base;
    strata_table *t = calloc(1, sizeof *t);
    void *page;

    if (t == NULL) return NULL;
    page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        free(t);
        return NULL;
    }
#ifdef MADV_WIPEONFORK
    madvise(page, 4096, MADV_WIPEONFORK); /* older kernels: counters_of's pid check resets them */
#endif
    t->proc = page;
    t->proc->pid = getpid();
    t->base = base;
    t->map_len = g->size;
    t->geo = *g;
    t->seed = h->seed;
    t->created_ms = h->created_ms;
    t->shard_data_bytes = (uint64_t)g->segments_per_shard * g->segment_size;
    t->shard_mask = g->shards - 1;
    /* Never fence under mere contention (table.h: STRATA_MIN_LOCK_TIMEOUT_NS). */
    t->lock_timeout_ns = lock_timeout_ns < MIN_LOCK_TIMEOUT_NS ? MIN_LOCK_TIMEOUT_NS : lock_timeout_ns;
    return t;
}

static strata_status file_map(int fd, const strata_geometry *g, uint8_t **base, int *err)
{
    uint8_t *p = mmap(NULL, g->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        if (err) *err = errno;
        return STRATA_EIO;
    }
    *base = p;
    return STRATA_OK;
}

void (*strata_open_test_hook)(int at);

/*
 * One try at opening name in dirfd. A valid file is mapped without any lock, so no other opener,
 * even one stopped halfway, can hold us up. An empty or bad file is handled under its flock,
 * after looking again (its holder may have built it meanwhile): built in place if empty, rebuilt
 * if it carries our magic, refused otherwise. *replaced is set, and nothing mapped, when name
 * was renamed over since we opened it; the caller opens the new file.
 */
static strata_status file_open_once(int dirfd, const char *name, const strata_geometry *g, uint64_t deadline,
                                    uint8_t **base, const char **reason, int *replaced, int *err)
{
    struct stat fst, pst;
    strata_status st;
    int fd = openat(dirfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);

    *reason = NULL;
    if (fd < 0) {
        if (errno == ELOOP) return STRATA_EUNSAFE;
        if (err) *err = errno;
        return STRATA_EIO;
    }
    if (fstat(fd, &fst) != 0) goto sys_fail;
    st = file_check_safe(&fst);
    if (st != STRATA_OK) goto done;
    if (fst.st_nlink == 0) { /* renamed over (rebuilt) since our open */
        *replaced = 1;
        goto done;
    }
    if (strata_open_test_hook) strata_open_test_hook(STRATA_OPEN_AT_VALIDATE);
    if (fst.st_size != 0 && file_validate(fd, &fst, g) == NULL) {
        st = file_map(fd, g, base, err);
        if (st != STRATA_OK) goto done;
        /* A rebuilder may have renamed a new file over name since the nlink check above; we
         * would then share nothing with later openers for as long as we live. Looked at again
         * now that the mapping is made: a rename after this point is any mapper's caveat. */
        if (fstat(fd, &pst) != 0 || pst.st_nlink == 0 ||
            fstatat(dirfd, name, &pst, AT_SYMLINK_NOFOLLOW) != 0 || pst.st_ino != fst.st_ino ||
            pst.st_dev != fst.st_dev) {
            munmap(*base, g->size);
            *base = NULL;
            *replaced = 1;
            goto done;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) { /* free now: tidy up, never wait */
            if (fstatat(dirfd, name, &pst, AT_SYMLINK_NOFOLLOW) == 0 && pst.st_ino == fst.st_ino &&
                pst.st_dev == fst.st_dev)
                file_sweep_temporaries(dirfd, name);
            flock(fd, LOCK_UN);
        }
        goto done;
    }

    st = file_lock(fd, deadline, err);
    if (st != STRATA_OK) goto done;
    if (fstatat(dirfd, name, &pst, AT_SYMLINK_NOFOLLOW) != 0 || pst.st_ino != fst.st_ino ||
        pst.st_dev != fst.st_dev) {
        *replaced = 1;
        goto unlock;
    }
    if (fstat(fd, &fst) != 0) goto sys_fail_unlock;
    st = file_check_safe(&fst);
    if (st != STRATA_OK) goto unlock;
    if (strata_open_test_hook) strata_open_test_hook(STRATA_OPEN_AT_BUILD);
    file_sweep_temporaries(dirfd, name);
    if (fst.st_size == 0) {
        st = file_build(fd, g, base, err); /* brand new: build in place */
    } else if ((*reason = file_validate(fd, &fst, g)) == NULL) {
        st = file_map(fd, g, base, err); /* built by the holder we waited for */
    } else if (!file_has_magic(fd)) {
        st = STRATA_EFOREIGN;
    } else {
        file_retire(fd, (uint64_t)fst.st_size);
        st = file_rebuild(dirfd, name, g, base, err);
    }
unlock:
    /* Unlock explicitly: the mapping holds the open file, so close alone would not. */
    flock(fd, LOCK_UN);
done:
    close(fd);
    if (st != STRATA_OK || *replaced) *reason = NULL;
    return st;

sys_fail_unlock:
    flock(fd, LOCK_UN);
sys_fail:
    if (err) *err = errno;
    close(fd);
    *reason = NULL;
    return STRATA_EIO;
}

/* The geometry of the table file at name in dirfd, into *g, when it is a READY table whose
 * header resolves to itself; 0 otherwise (g untouched). Read with pread, unlocked: whatever it
 * answers, file_open_once validates the file against g again before mapping it. */
static int file_geometry(int dirfd, const char *name, uint64_t lock_timeout_ns, strata_geometry *g)
{
    struct file_header h;
    strata_geometry found;
    strata_options o;
    const char *what;
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    ssize_t n;

    if (fd < 0) return 0;
    n = pread(fd, &h, sizeof h, 0);
    close(fd);
    if (n != (ssize_t)sizeof h || h.magic != MAGIC || h.version != LAYOUT_VERSION || h.state != STATE_READY ||
        h.check != header_check(&h) || h.shards == 0)
        return 0;
    memset(&o, 0, sizeof o);
    o.size = h.file_size;
    o.shards = h.shards;
    o.segment_size = h.segment_size;
    o.slots = (uint64_t)h.shards * h.buckets_per_shard * STRATA_SLOTS_PER_BUCKET;
    o.lock_timeout_ns = lock_timeout_ns;
    if (strata_geometry_resolve(&o, &found, &what) != STRATA_OK || found.buckets_per_shard != h.buckets_per_shard ||
        found.segments_per_shard != h.segments_per_shard || found.index_offset != h.index_offset ||
        found.data_offset != h.data_offset || found.ctl_offset != h.ctl_offset)
        return 0;
    *g = found;
    return 1;
}

strata_status strata_open(const char *path, const strata_options *opts, strata_table **out,
                          const char **rebuilt_reason, int *sys_errno)
{
    strata_geometry g;
    const char *what, *name;
    int dirfd = -1;
    uint64_t deadline;
    strata_status st = strata_geometry_resolve(opts, &g, &what);

    *out = NULL;
    if (rebuilt_reason) *rebuilt_reason = NULL;
    if (st != STRATA_OK) return st;
    st = dir_open(path, &dirfd, &name, sys_errno);
    if (st != STRATA_OK) return st;
    if (opts->adopt) file_geometry(dirfd, name, opts->lock_timeout_ns, &g);

    /* Bound: OPEN_ATTEMPTS; we go round again only when another process renamed a new file over
     * name between our open and our check. All of them together wait FLOCK_WAIT_MS at most. */
    deadline = mono_ms() + FLOCK_WAIT_MS;
    st = STRATA_EFLOCK;
    for (int attempt = 0; attempt < OPEN_ATTEMPTS; attempt++) {
        uint8_t *base = NULL;
        const char *reason = NULL;
        int replaced = 0;

        st = file_open_once(dirfd, name, &g, deadline, &base, &reason, &replaced, sys_errno);
        if (replaced) {
            st = STRATA_EFLOCK;
            continue;
        }
        if (st != STRATA_OK) break;
        *out = table_new(base, &g, opts->lock_timeout_ns);
        if (*out == NULL) {
            munmap(base, g.size);
            st = STRATA_ENOMEM;
            break;
        }
        if (rebuilt_reason) *rebuilt_reason = reason;
        break;
    }
    close(dirfd);
    return st;
}

void strata_close(strata_table *t)
{
    if (t == NULL) return;
    /* A held lock is on this thread's robust list by its address in the mapping; unmapping it
     * would stop the kernel from marking it owner-dead when the thread exits, and the shard
     * would stay locked for good. Such a mapping is left in place. */
    if (t->proc->slot != 0) strata_counter_release(counters_region(t), t->proc->slot - 1, getpid());
    if (__atomic_load_n(&t->held_locks, __ATOMIC_RELAXED) == 0) munmap(t->base, t->map_len);
    munmap(t->proc, 4096);
    free(t);
}
