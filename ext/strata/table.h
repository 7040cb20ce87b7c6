/*
 * table.h - Strata's L1: a hash table in one memory-mapped file, shared by every process of an
 * app on one host. This header is the contract; table.c implements it, lock.c holds the mutex.
 *
 * CONCURRENCY MODEL
 *   The table is split into N shards. Each shard has one writer lock (a robust, process-shared
 *   mutex in the file); any thread of any process may write a shard while holding its lock, and
 *   writers of different shards never block each other. Readers take no lock and never block
 *   anyone: they validate what they read with a per-bucket sequence counter (a seqlock) and a
 *   per-item checksum, retry a bounded number of times, and report a miss rather than return
 *   bytes they could not validate. The only thing a reader writes is a reference bit in an index
 *   slot, and only when it is clear. A writer that dies holding a lock costs its shard's contents:
 *   the next writer of that shard drops the shard and carries on. A writer that cannot take the
 *   lock (held too long, or unusable) fences its key instead: one atomic OR on the key's bucket
 *   word makes the key read as a miss at once, and the shard's next lock holder drops what the
 *   fence covers. So once a failed write returns, no read that starts after it returns the
 *   value it meant to replace.
 *
 * FILE LAYOUT (all integers in the CPU's byte order, which the fingerprint records)
 *
 *   offset 0            file header, one 4096-byte page (struct file_header in table.c):
 *                         u64 magic "STRATAL1"      u32 layout version   u32 state
 *                         u64 fingerprint           u64 file size
 *                         u32 shards                u32 buckets per shard
 *                         u32 segments per shard    u32 segment size
 *                         u64 ctl offset            u64 index offset     u64 data offset
 *                         u64 hash seed             u32 creator uid      u32 creator pid
 *                         u64 created at (unix ms)  u64 boot id (hash of the boot_id of the boot
 *                         that built it; 0 = unknown) u64 header check (hash of every field above
 *                         except state, which changes once)
 *                       state is INITIALIZING (1) while the builder fills the file and READY (2)
 *                       after, and RETIRED (3) once a rebuilder is about to rename another file
 *                       over it (strata_retired); nothing else is ever written to the header
 *                       after READY.
 *   ctl offset = 4096   shards x 128-byte shard control blocks, rounded up to 4096:
 *                         pthread_mutex_t lock; u32 active segment; u32 next cas;
 *                         u64 drops (times the shard was dropped); u64 rotations;
 *                         u64 fenced (fences set and not yet cleared);
 *                         u32 fence overflow (nonzero: a fenced bucket was not logged);
 *                         u32 fence log[10] (fenced bucket index + 1; 0 = free entry)
 *   counters offset     the host's counters (counters.h: its layout, invariants and caveats),
 *     = ctl offset +    STRATA_COUNTERS_BYTES (132 KiB): a 4096-byte region header (u64
 *     ctl bytes         unslotted), then 128 slots of 1024 bytes, one per process that counts
 *                       (u64 owner pid, u64 claims, 6 unused, 120 u64 counter words). Not in
 *                       the header: derived from ctl offset and shards, and checked through
 *                       index offset, which follows the fill locks.
 *   fill locks offset   the host's fill locks (fill_locks.h: its layout, invariants and
 *     = counters offset caveats), STRATA_FILL_LOCK_BYTES (64 KiB): 8,192 u64 lock words, each
 *     + 132 KiB         0 or a key's hash tag and expiry. Not in the header either: derived
 *                       as the counters region is.
 *   index offset        shards x buckets-per-shard buckets of 64 bytes (one cache line), shard 0
 *                       first, rounded up to 4096:
 *                         u64 word; u64 slot[7]
 *                       word = fence mask (low 32 bits) | seq (high 32 bits)
 *                       fence bit (tag mod 32) set = keys of that tag read as a miss
 *                       slot = loc (low 32 bits) | tag (bits 32..62) | ref (bit 63)
 *                       loc = item offset within its shard's data / 8 + 1; 0 = empty slot
 *                       tag = 31 bits of the key hash not used to pick shard and bucket
 *   data offset         shards x segments-per-shard segments of segment-size bytes, shard 0
 *                       first. A segment is a 16-byte header (u32 fill = bytes used including
 *                       the header, 0 = never used; 4 bytes unused; u64 started_ms, see below)
 *                       followed by items, 8-byte aligned, written like a log:
 *                         u32 value_len  u32 checksum  u64 expires_at_ms (unix ms, 0 = never)
 *                         u32 cas        u16 key_len   u8 flags           u8 unused
 *                         key bytes, value bytes, zero padding to 8
 *                       checksum = low 32 bits of a hash over the key hash, the header fields
 *                       (except checksum) and the value.
 *
 *   From a 64-bit key hash h: shard = bits 56..63 masked to the shard count, bucket = bits
 *   24..55 scaled onto the bucket count, tag = bits 0..30.
 *
 * SHARED STRUCTS: LAYOUT (above), GUARD, WHAT A READER MAY SEE STALE, HOLDER DEATH
 *   file header
 *     guard:  written once by the builder, which holds flock(2) on the file and has not yet
 *             published it (state INITIALIZING); read-only once READY.
 *     stale:  nothing but state, which goes from READY to RETIRED once (an atomic store through
 *             the rebuilder's mapping of the header page, under the file's flock), and which
 *             every operation of the binding loads after its work (strata_retired). The rest
 *             never changes after READY. Validated field by field at open (and by
 *             the header check hash); any mismatch rebuilds the file (a wrong magic number
 *             refuses it instead: Caveats, files written by others), and so does a boot id
 *             other than this boot's (a mutex held when the machine went down is never marked
 *             owner-dead, so a file from another boot may hold a lock nobody can take). A boot
 *             id of 0, in the file or for this process (no readable /proc), is unknown and
 *             accepted: otherwise processes with and without one would rebuild each other's file
 *             for ever.
 *     death:  a builder that dies leaves state INITIALIZING (the magic number is written before
 *             anything else), or an empty file; the next opener rebuilds or builds it.
 *   shard control block
 *     guard:  the mutex itself; every other field is read and written only by the holder,
 *             except the fence fields: a writer that failed to take the lock sets its bucket's
 *             fence bit, then notes the bucket in a free fence log entry (compare-and-swap
 *             from 0; fence overflow set when none is free), then adds 1 to fenced. The holder
 *             loads fenced, takes the overflow flag and every log entry (atomic swaps for 0),
 *             unfences the buckets noted (all of them after an overflow), then subtracts the
 *             count it loaded (atomic); so unfencing costs O(fences), not O(buckets).
 *     stale:  readers never look at it.
 *     death:  fields may be half updated; the recovering writer resets all of them (shard
 *             drop). active and the active segment's fill are also copied once and validated
 *             every time the lock is taken, and the writer uses only that copy, so a garbled
 *             block (or a process scribbling over it meanwhile) drops the shard rather than
 *             misdirect writes.
 *   bucket (word + 7 slots)
 *     guard:  slots: the shard mutex, with the seqlock protocol: seq made odd, slots (and any
 *             item bytes they point to) changed, seq made even with a release. The word is only
 *             ever changed by atomic read-modify-writes: seq by the holder, fence bits set by
 *             any writer without the lock (bucket_fence) and cleared by the holder, in a seq
 *             window in which it also unlinks every item the cleared bits cover.
 *     stale:  a reader loads the word (acquire), misses at once if its key's fence bit is set,
 *             reads slots and item, re-checks the whole word after an acquire fence; odd or
 *             changed means retry (at most 4 times, then a miss). So no reader that validates
 *             after a fence was set returns the value it covers, even one that began before
 *             it; a reader that validated just before the fence may still return that value,
 *             as if it had finished before the failed write began. The ref bit
 *             is set by readers with a compare-and-swap against the exact slot value they
 *             validated, so it lands on that slot value or nowhere; a lost ref bit only makes
 *             an item an eviction candidate one round early.
 *     death:  a writer that dies inside the window leaves seq odd; readers of that bucket miss
 *             until the next writer of the shard drops it, which leaves every seq even and
 *             every fence clear. A fence outlives its writer by design: it is cleared only by
 *             a lock holder that dropped what it covered. A writer that dies between its
 *             fence bit and its count (or damage) leaves a bit no count covers: every write
 *             clears the fence bits of the bucket it writes to, so that bit goes with the
 *             next write there (a fill after the miss, at the latest).
 *   segment and items
 *     guard:  the shard mutex. Bytes a slot points to are never changed while it points there,
 *             except inside that slot's bucket's odd-seq window (compaction moving an item).
 *             The segment header's fill is read by writers, and with started_ms by
 *             strata_segments_get (which reports them and nothing else).
 *     stale:  a reader may copy bytes a writer is reusing; it then fails the seq re-check or
 *             the checksum (computed on its private copy). Every loc and length is bounds-
 *             checked against the shard's data and the item's segment before use, and the full
 *             key is compared. (These copies race with writers in the C11 sense, as any
 *             seqlock's do; the header words are read with atomic loads, the rest is only
 *             trusted after validation.)
 *     death:  half-written items are not yet published (no slot points at them); a half-done
 *             compaction is discarded with the whole shard by the recovering writer.
 *   segment start (started_ms)
 *     what:   unix ms (CLOCK_REALTIME, the clock of expires_at_ms, so ages compare with TTLs)
 *             at which the writer began appending to the segment: its first use after the
 *             build or a shard drop, or the rotation that compacted it and made it the active
 *             one. Items kept by that compaction are older than it; everything after them is
 *             younger. 0 = unknown (a file written by an earlier build of layout 4, which left
 *             these bytes zero) or unused.
 *     guard:  written by the shard lock holder only (ensure_space, zeroed by shard_drop), with a
 *             relaxed atomic store (a plain 8-byte store on x86-64 and arm64) after reading
 *             the clock.
 *             It is advisory: nothing in the table decides anything by it, so it needs no
 *             ordering against fill or the items.
 *     stale:  strata_segments_get copies fill and started_ms without the lock (once each; they
 *             may be from either side of a rotation), then reads the clock, and reports a copy
 *             later than that or earlier than the file's created_ms as 0 (unknown): the clock
 *             was set back, or the bytes are garbage. A valid-looking garbage time is reported
 *             as is.
 *     death:  a writer that dies leaves the old time or the new one (one aligned store); the
 *             recovering writer's drop zeroes them with the fills.
 *
 * POLLED ITEMS
 *   flags is 0 or STRATA_ITEM_POLLED, set by the write that stores the item (strata_write_req's
 *   flags) and covered by its checksum. A POLLED item is a copy that the host's poller keeps
 *   current (Ruby's Strata::Poller drops it when another host changes what it copies): it is
 *   live only while its own expiry has not passed AND the clock is before polled_until, a word
 *   of the counters region's header (counters.h) that the poller's election holder sets after
 *   every round that read the whole log (strata_polled_until_put). When the poller stops
 *   (its process stopped, the database down), every POLLED item reads as absent once that time
 *   passes, in every process at once, and writers treat it as expired (add replaces it,
 *   compaction drops it); a later vouch makes those not yet dropped live again, which is right:
 *   the round that vouches has applied every change before it began. The word is read once per
 *   liveness test of a POLLED item (one atomic load of a line written at most once a round);
 *   other items never read it. Cost: the clock, which the item's expiry reads anyway.
 *   stale: a reader may see the word from just before a store; a vouch is always for a time
 *   later than the round's start, so what that costs is a POLLED item read as live up to one
 *   round longer than a strict reading would allow, never beyond the last vouch's deadline.
 *
 * EVICTION AND SIZING
 *   A shard's segments form a ring. Writes append to the active segment. When an item does not
 *   fit, the next segment (the oldest) is compacted in place and becomes the active one: every
 *   item in it that is still indexed, unexpired and has its ref bit set is kept (moved down, ref
 *   cleared), up to a copy budget that leaves room for the new item; everything else is unlinked.
 *   That is CLOCK with a second chance at segment granularity: O(segment) work per rotation, O(1)
 *   amortised per write. When a bucket's 7 slots are full, the new key takes the slot of the
 *   oldest item, preferring items with the ref bit clear. A full table evicts; it never refuses.
 *   Because a key may only live in its one bucket, a table whose slots are half used already
 *   displaces about 1% of new keys' neighbours this way, about 5% at 70% (measured).
 *
 *   Defaults (strata_geometry_resolve): shards = 16, halved while a shard would get under 512 KiB.
 *   segment size = size / (shards * 16) rounded down to a power of two, clamped to 64 KiB..4 MiB.
 *   After the header, control blocks, counters region and fill locks, whole segments get
 *   7*96/(7*96 + 64) = 91.3% of the space (rounded down to whole segments) and the index gets
 *   the rest, which is at least one slot per STRATA_DATA_PER_SLOT (96) data bytes. slots: overrides that, rounded up to whole
 *   buckets per shard.
 *   Metadata per entry = 24-byte item header + (64/7 = 9.14 index bytes per slot) / load, plus
 *   under 8 bytes of alignment padding; 48 bytes or less at any load >= 0.38. An entry of a
 *   30-byte value under a 40-byte key takes exactly 96 data bytes. Example, 64 MiB with defaults:
 *   16 shards x 14 segments of 256 KiB (87.5% of the file), 894,656 slots (12.2%; the counters
 *   region takes 132 KiB, the fill locks 64 KiB); full of such entries it holds 611,669 of them
 *   at load 0.68:
 *   24 + 9.14/0.68 = 37.5 bytes of metadata each.
 *   max value size = segment size - 16 - 24 (key + value bytes): an item never spans segments.
 *
 * DEVIATIONS FROM THE FIRST PLAN (docs/architecture.md, "Where it departs from the plan")
 *   - The CLOCK ref bit is in the index slot, not the item header. A reader that set a byte in
 *     an item could race with compaction moving another item over those bytes and corrupt it;
 *     a CAS on the slot cannot land anywhere but the slot value the reader validated.
 *   - A slot is one 64-bit word (loc and tag together) so a reader never sees a loc from one
 *     write and a tag from another.
 *   - No clean-shutdown flag: processes come and go while the file lives on, so a crash is
 *     repaired per shard through the robust mutex instead of by rebuilding the whole file. The
 *     header's state (INITIALIZING/READY) covers a build that never finished.
 *   - strata_stats_get's counters live in a private per-handle page (MADV_WIPEONFORK, so a
 *     forked child starts at zero with no pid check on the hot path), not in the mapping: they
 *     are this process's. The host's figures are the counters region (counters.h), a slot per
 *     process in the mapping, which the table adds evictions to and the binding the rest.
 *
 * CAVEATS (each with its remedy)
 *   fork: a child keeps using the mapping and the handle; its statistics start at zero, and it
 *     claims a counters slot of its own at its first count (counters.h). A lock
 *     held by another thread of the parent at fork is still held by that thread in the parent,
 *     so the child just waits for it like any other process. Remedy: nothing to do.
 *   /dev/shm size in containers: Docker gives /dev/shm 64 MiB by default. The file's space is
 *     reserved with posix_fallocate at build time, so a table that does not fit fails to open
 *     (STRATA_ENOSPC) instead of dying with SIGBUS later. Remedy: --shm-size, or a path on
 *     another tmpfs ($XDG_RUNTIME_DIR).
 *   crashes: a process killed mid-write leaves its shard's lock owner-dead; the next writer of
 *     that shard drops the shard (its entries become misses) and repairs the lock. A crash while
 *     building the file leaves state INITIALIZING; the next opener rebuilds it. A rebuilder
 *     killed before its rename leaves "<path>.tmp-<pid>-<hex>"; the next opener that finds the
 *     file's flock free (never waiting for it) removes it. A reboot empties tmpfs; a file on
 *     disk survives and is validated like any other.
 *   rebuild: a rebuilt file replaces the old one by rename(2). The rebuilder first marks the old
 *     file RETIRED; a process that still maps it keeps working on it (no SIGBUS) until its next
 *     operation through the binding, which sees the mark after its work, opens the new file
 *     (adopting its geometry, so processes with two sizes configured don't rebuild each other's
 *     file in turn) and does the operation again there. So a write or delete that lands in the
 *     old file after the rename is also done in the new one, and no read answers from the old
 *     file once the new one is in use. A rebuild that fails after the mark (no space) leaves
 *     the retired file at path: its users reopen, and the first rebuilds it.
 *   the same file opened twice in one process: works (two mappings of one file), but the lock of
 *     a shard is per thread, so a thread that holds a shard through one handle (the test hook
 *     strata_lock_shard) gets STRATA_LOCK_TIMEOUT from the other. A lock held through the test
 *     hook when its handle is closed stays held until the thread exits; strata_close then leaves
 *     the mapping in place, because the kernel finds a dead owner's robust locks through their
 *     mapped addresses.
 *   SIGSTOPped holder: a writer stopped while holding a shard lock blocks that shard's writers;
 *     each of them gives up after lock_timeout (STRATA_LOCK_TIMEOUT) and fences its key, which
 *     then reads as a miss (with 1/32 of its bucket's other keys) until the holder is gone and
 *     another writer takes the lock. Readers never wait. Remedy: SIGCONT or kill it; a killed
 *     holder is recovered as above. Never forced.
 *   reboot: a lock held when the machine went down stays held in a file on disk (the kernel
 *     marks robust mutexes owner-dead only when their owner exits). The header records the
 *     boot; a file from another boot is rebuilt at open. Remedy: nothing to do, except where
 *     /proc/sys/kernel/random/boot_id can't be read (the boot is then unknown and not checked):
 *     keep the file on tmpfs, which a reboot empties.
 *   SIGSTOPped opener: opening a valid file takes no lock, so it never waits for another opener.
 *     One stopped while building or rebuilding the file holds its flock: openers of that unbuilt
 *     or bad file give up after 1 s (STRATA_EFLOCK). Remedy: SIGCONT or kill it; the next opener
 *     builds the file.
 *   files written by others: a directory owned by another uid, writable by group or others, or a
 *     symlink is refused (STRATA_EUNSAFE_DIR); so is a file owned by another uid, with any group
 *     or other permission bit, with a second hard link, a symlink or not a regular file
 *     (STRATA_EUNSAFE). Neither is ever rebuilt. A non-empty file without our magic number is
 *     not ours to rebuild (STRATA_EFOREIGN): a table whose first 8 bytes are damaged must be
 *     removed by hand. Random damage to the index or data makes reads miss, never crash
 *     (test/c: corruption_fuzz). The checksum is not a MAC: a process that can write the file can
 *     plant values. Damage to a shard's mutex bytes can make that shard's writes time out until a
 *     rebuild. Remedy: keep the directory 0700 (default_path's is).
 *   truncation: a process of the app's uid that truncates the file (truncate(1), a stray
 *     "> file") makes every process mapping it die of SIGBUS at its next access past the new
 *     end. Not handled: recovering would need a SIGBUS handler that jumps out of the faulting
 *     copy, which a Ruby process (whose VM owns SIGBUS) can't install safely, and a writer would
 *     jump out holding its shard's lock. Only our uid can do it (the directory and file are
 *     private); a rebuild never truncates a file in use (it renames a new one over it).
 *   processes that disagree on geometry: each opener that asks for another size or geometry
 *     rebuilds the file, and the others keep mapping the old one. Remedy: one configuration per
 *     path; the rebuild warning names the path.
 *
 * THREADS
 *   A handle may be used by several threads at once, except strata_close, which must run when no
 *   other call on the handle is in progress. Statistics counters are per handle and updated
 *   without a locked instruction: concurrent threads may lose an increment.
 */
#ifndef STRATA_TABLE_H
#define STRATA_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "fill_locks.h"

/* Status codes of every strata_ function. strata_strerror gives a message. */
typedef enum strata_status {
    STRATA_OK = 0,
    STRATA_NOT_FOUND,    /* no live entry under the key */
    STRATA_NOT_STORED,   /* add: a live entry exists; cas: entry absent or changed */
    STRATA_BUSY,         /* lock held by someone else and the call was told not to wait */
    STRATA_LOCK_TIMEOUT, /* shard lock not taken within lock_timeout */
    STRATA_TOO_LARGE,    /* key + value larger than max_value_size; nothing written */
    STRATA_NOT_NUMBER,   /* incr/decr on a value that is not an unsigned decimal */
    STRATA_EINVAL,       /* bad argument: key length, option value */
    STRATA_EGEOMETRY,    /* the size is too small (or too large) for the requested geometry */
    STRATA_EUNSAFE,      /* file of another uid, group/other-accessible, linked twice, symlink, not regular */
    STRATA_EIO,          /* a system call failed; the errno is reported alongside */
    STRATA_ENOSPC,       /* the file's space could not be reserved (tmpfs full) */
    STRATA_EFLOCK,       /* timed out waiting for another process building the file */
    STRATA_ELOCK,        /* a shard mutex is unusable (not recoverable) */
    STRATA_ENOMEM,       /* out of memory */
    STRATA_EUNSAFE_DIR,  /* the file's directory is another uid's, group/other-writable or a symlink */
    STRATA_EFOREIGN,     /* a non-empty file without the table's magic number: never overwritten */
    STRATA_ERETIRED,     /* the table's file was retired by a rebuild and its path could not be opened */
    STRATA_STATUS_COUNT
} strata_status;

/* A static message for status; never NULL. */
const char *strata_strerror(strata_status status);

/* Limits. */
#define STRATA_MAX_KEY 250
#define STRATA_MIN_SIZE (1u << 20)
#define STRATA_MAX_SHARDS 256
#define STRATA_MIN_SEGMENT 4096u
#define STRATA_MAX_SEGMENT (64u << 20)
#define STRATA_SLOTS_PER_BUCKET 7
#define STRATA_DATA_PER_SLOT 96

typedef struct strata_table strata_table; /* one open file in one process; opaque */

/* What the caller asks for. Zero means "default" for shards, segment_size and slots. */
typedef struct strata_options {
    uint64_t size;            /* file bytes, >= STRATA_MIN_SIZE */
    uint32_t shards;          /* power of two, 1..STRATA_MAX_SHARDS */
    uint32_t segment_size;    /* multiple of 4096, STRATA_MIN_SEGMENT..STRATA_MAX_SEGMENT */
    uint64_t slots;           /* index slots in total, rounded up to whole buckets */
    uint64_t lock_timeout_ns; /* how long a writer waits for a shard lock before it fences its
                               * key; raised to STRATA_MIN_LOCK_TIMEOUT_NS if lower (0 too) */
    int adopt;                /* nonzero: a valid table already at path is opened with its own
                               * geometry, whatever the fields above ask (a reopen after
                               * strata_retired); they count only for a file that must be built */
} strata_options;

/*
 * The shortest a writer waits for a shard lock before it gives up and fences its key: 10 ms.
 * A fence is for a holder that is stuck (stopped, in a debugger, swapped out): it turns the key
 * into a miss. A healthy holder keeps the lock for microseconds, and for longer only while it
 * compacts a segment (up to 4 MiB moved and hashed: about a millisecond) or is preempted on a
 * busy host (a few milliseconds). A writer that gave up sooner would fence under ordinary
 * contention, and each fence made the next holder do more, so the lock got harder to take:
 * two processes doing random sets of 20,000 keys on one shard for 2 s with lock_timeout 0 (one
 * trylock) fenced 3.3M of 4.6M writes and left 15,821 keys missing; with 50 ms, none. (Clearing
 * fences now costs O(fences), but each fence still costs its key.) The Ruby API refuses
 * lock_timeout below this (ArgumentError); strata_open raises a lower value to it.
 */
#define STRATA_MIN_LOCK_TIMEOUT_NS (10u * 1000u * 1000u)

/* The resolved geometry of a table. */
typedef struct strata_geometry {
    uint64_t size;
    uint32_t shards;
    uint32_t buckets_per_shard;
    uint32_t segments_per_shard;
    uint32_t segment_size;
    uint64_t slots;          /* shards * buckets_per_shard * 7 */
    uint64_t ctl_offset;
    uint64_t counters_offset; /* the host's counters region (counters.h) */
    uint64_t fill_locks_offset; /* the host's fill locks (fill_locks.h) */
    uint64_t index_offset;
    uint64_t data_offset;
    uint64_t data_bytes;     /* shards * segments_per_shard * segment_size */
    uint64_t max_value_size; /* largest key_len + value_len that fits */
} strata_geometry;

/* Per-handle counters; see strata_stats. */
typedef struct strata_counters {
    uint64_t hits, misses, sets, deletes, evictions, expired, lock_timeouts, too_large,
        owner_died_recoveries, torn_reads, fill_lock_collisions;
} strata_counters;

typedef struct strata_stats {
    strata_counters counters;
    strata_geometry geometry;
    uint64_t entries; /* live, unexpired entries, counted by a lock-free scan */
} strata_stats;

/*
 * Resolve opts into a geometry without touching any file. Returns STRATA_OK, STRATA_EINVAL (an
 * option out of range; *what names it) or STRATA_EGEOMETRY (size too small for the shards and
 * segments asked for; *what says so). *what is a static string.
 */
strata_status strata_geometry_resolve(const strata_options *opts, strata_geometry *out,
                                      const char **what);

/*
 * Open or build the table file at path. Its directory must exist, be ours and be writable by
 * nobody else, and not be a symlink (else STRATA_EUNSAFE_DIR); every name is then looked up
 * relative to it (openat, renameat). The file, if it exists, must be a regular file of ours with
 * one link and no group or other permission bits (else STRATA_EUNSAFE); a new one is 0600.
 * A valid file is validated (header, size, geometry) with pread and mapped without any lock, so
 * an opener never waits for another one. Only an empty or bad file is handled under flock(2):
 * it is looked at again (the lock's last holder may have built it), an empty file is built in
 * place, and a file carrying our magic number that fails validation (size, version,
 * fingerprint, geometry, check, unfinished build) is rebuilt into a new file renamed over
 * path; *rebuilt_reason is then a static string saying why (NULL when nothing was rebuilt; a
 * brand-new empty file is not a rebuild). A non-empty file without our magic number is somebody
 * else's and is never written (STRATA_EFOREIGN).
 * Returns STRATA_OK, STRATA_EINVAL/STRATA_EGEOMETRY (options), STRATA_EUNSAFE_DIR,
 * STRATA_EUNSAFE, STRATA_EFOREIGN, STRATA_EIO (*sys_errno set), STRATA_ENOSPC, STRATA_EFLOCK,
 * STRATA_ELOCK, STRATA_ENOMEM.
 * Blocking: opening a valid file takes no lock. An empty or bad one waits up to 1 s for a
 * process building it (STRATA_EFLOCK after that: a builder stopped with SIGSTOP keeps its lock
 * until it is continued or killed). Call without locks held.
 */
strata_status strata_open(const char *path, const strata_options *opts, strata_table **out,
                          const char **rebuilt_reason, int *sys_errno);

/* Whether t's file has been retired by a rebuild (another file is, or is about to be, at its
 * path): one sequentially consistent load of the header's state. A caller that sees it after an
 * operation opens the path again (opts.adopt) and repeats the operation there. */
int strata_retired(const strata_table *t);

/* The header's state word of t, for a caller that checks strata_retired's answer inline on a
 * hot path: STRATA_STATE_RETIRED there (a sequentially consistent load) is strata_retired. */
#define STRATA_STATE_RETIRED 3u
const uint32_t *strata_state_word(const strata_table *t);

/* Unmap and free. NULL is allowed. A handle with a lock still held through strata_lock_shard
 * keeps its mapping (see Caveats). */
void strata_close(strata_table *t);

/*
 * Where strata_get copies a value: reserve(ctx, len, version) returns a buffer of len bytes, or
 * NULL (then strata_get returns STRATA_ENOMEM), or STRATA_SINK_HAVE to say the caller already
 * holds a validated copy of exactly this item, so nothing is copied. It may be called more than
 * once per get (retries); only the last call counts. It runs with no lock held and may allocate.
 *
 * version identifies one published item: (checksum << 32) | cas. The checksum covers the key,
 * the value, its length, expiry and cas, so two items under one key with the same version and
 * length hold the same value, except when the shard's 32-bit cas counter has come round to the
 * same number (a shard drop restarts it, or 2^32 writes) AND two different values collide in
 * 32 bits of checksum. A HAVE answer is still seq-checked: it counts only if the bucket did not
 * change while the item's header was read.
 */
typedef struct strata_sink {
    void *(*reserve)(void *ctx, size_t len, uint64_t version);
    void *ctx;
} strata_sink;

/* reserve's answer for "already have it": a valid address that is never a buffer. */
extern char strata_sink_have_[1];
#define STRATA_SINK_HAVE ((void *)strata_sink_have_)

/*
 * Look up key (1..STRATA_MAX_KEY bytes). Lock-free. On STRATA_OK the value was copied through
 * sink (or the sink's last reserve answered STRATA_SINK_HAVE) and *cas_out (if not NULL) holds
 * the entry's cas token.
 * Returns STRATA_OK, STRATA_NOT_FOUND (also for an entry that could not be read consistently in
 * 4 attempts, counted as torn_reads), STRATA_EINVAL, STRATA_ENOMEM.
 */
strata_status strata_get(strata_table *t, const void *key, size_t key_len, const strata_sink *sink,
                         uint64_t *cas_out);

/*
 * strata_get judging expiry against *now (unix ms): 0 until a lookup needs the clock, which
 * then reads it once and stores it there. Several lookups made for one answer (stamp_check.h)
 * share one *now and so read the clock at most once: a system call on some VMs, and dearer
 * than the lookup itself. The time is the first lookup's that needed it: a later lookup of the
 * same call may find an item live that expired since, by as long as the call has run.
 */
strata_status strata_get_at(strata_table *t, const void *key, size_t key_len, const strata_sink *sink,
                            uint64_t *cas_out, uint64_t *now);

/* The seeded hash by which this table locates key (per file: two tables hash apart). For a
 * caller that looks the same keys up again and again and keeps their hashes (stamp_check.h). */
uint64_t strata_key_hash(const strata_table *t, const void *key, size_t key_len);

/* strata_get_at for a key whose strata_key_hash the caller kept, without hashing it again. A
 * hash that is not this table's for key finds nothing (STRATA_NOT_FOUND, never another key's
 * value; a torn read when a slot matched by chance). */
strata_status strata_get_hashed(strata_table *t, const void *key, size_t key_len, uint64_t hash,
                                const strata_sink *sink, uint64_t *cas_out, uint64_t *now);

/* One write; see strata_write. */
typedef enum strata_op {
    STRATA_OP_SET,
    STRATA_OP_ADD,
    STRATA_OP_CAS,
    STRATA_OP_DELETE,
    STRATA_OP_INCR,
    STRATA_OP_DECR
} strata_op;

typedef struct strata_write_req {
    strata_op op;
    const void *key;
    size_t key_len;
    const void *value; /* SET, ADD, CAS */
    size_t value_len;
    const void *head;  /* SET, ADD, CAS: bytes stored before value, so that the entry's value
                        * is head followed by value without the caller joining them first
                        * (NULL with head_len 0: none). Limits count both. */
    size_t head_len;
    uint64_t ttl_ms;   /* 0 = never expires; for INCR/DECR only used when storing initial */
    uint64_t cas;      /* CAS: the token from strata_get */
    uint64_t amount;   /* INCR/DECR */
    uint64_t initial;  /* INCR/DECR: stored when absent and has_initial */
    int has_initial;
    uint64_t result;   /* out, INCR/DECR: the new value */
    unsigned flags;    /* SET, ADD, CAS: STRATA_ITEM_POLLED or 0 (POLLED ITEMS); INCR/DECR
                        * store 0 */
    uint64_t fill_token; /* ADD: the key's fill lock token (strata_fill_lock) of the fill that
                          * adds, 0 for none: refused (STRATA_NOT_STORED) when a SET or DELETE
                          * of the key marked that lock since (fill_locks.h, INVARIANTS) */
} strata_write_req;

/* An item that is live only while the host's poller vouches for the table (POLLED ITEMS). */
#define STRATA_ITEM_POLLED 0x01u

/*
 * Apply one write under the key's shard lock.
 *   wait == 0: try the lock once and return STRATA_BUSY if it is held (use from a thread that
 *              must not block, then call again with wait = 1 somewhere it may).
 *   wait != 0: wait up to lock_timeout (at least STRATA_MIN_LOCK_TIMEOUT_NS).
 * The key, head and value buffers are read while the lock is held; nothing is allocated then.
 * They are the caller's own: they must not change during the call (the item's checksum is taken
 * from them as they are copied in, not from the table afterwards) and must not lie in the table.
 * When the lock can't be taken (STRATA_LOCK_TIMEOUT, STRATA_ELOCK; not STRATA_BUSY, which the
 * caller retries) the key is fenced: it reads as a miss from then on, in every process, until a
 * later writer of its shard has dropped the old item. A DELETE has then done its job and returns
 * STRATA_OK when the key held a live entry (as far as a lock-free look can tell; NOT_FOUND if a
 * fence already hid it), STRATA_NOT_FOUND otherwise; the other ops return the lock's status.
 * A SET or DELETE first marks the key's fill lock changed (fill_locks.h), so that a fill under
 * way gives way to it.
 * Returns STRATA_OK; STRATA_NOT_FOUND (DELETE, INCR/DECR without initial: no live entry);
 * STRATA_NOT_STORED (ADD, CAS); STRATA_NOT_NUMBER (INCR/DECR); STRATA_TOO_LARGE (nothing
 * written); STRATA_BUSY; STRATA_LOCK_TIMEOUT; STRATA_ELOCK; STRATA_EINVAL.
 */
strata_status strata_write(strata_table *t, strata_write_req *req, int wait);

/* Remove every expired entry. O(slots); locks one shard at a time. *removed counts them.
 * Shards whose lock can't be taken are skipped (a timeout is counted as lock_timeouts); returns
 * STRATA_OK, or the status of the last shard skipped (STRATA_LOCK_TIMEOUT or STRATA_ELOCK). */
strata_status strata_cleanup(strata_table *t, uint64_t *removed);

/* Remove everything, one shard at a time. A shard whose lock can't be taken is fenced whole
 * (every key in it reads as a miss at once; its next lock holder drops it), so this returns
 * STRATA_OK; O(buckets of that shard) atomic ORs. */
strata_status strata_clear(strata_table *t);

/*
 * Lock-free snapshot scan of live keys: calls each(ctx, key, len) once per live unexpired key
 * found, with no lock held (each may allocate). A key is reported only if strata_get could
 * return it: found where it hashes to, not fenced, its item's checksum intact. O(slots + data
 * bytes hashed). Keys written during the scan may or may not be seen; a key is never reported
 * twice unless it moved while the scan ran.
 */
void strata_keys(strata_table *t, void (*each)(void *ctx, const void *key, size_t len), void *ctx);

/* Counters of this handle (zero in a forked child until it does something), geometry, entries. */
void strata_stats_get(strata_table *t, strata_stats *out);

const strata_geometry *strata_geometry_of(const strata_table *t);

/* A segment as strata_segments_get saw it. */
typedef struct strata_segment {
    uint32_t fill;       /* bytes used including the header; 0 = unused (or unreadable) */
    uint64_t started_ms; /* when the writer began appending to it (LAYOUT, segment start), unix
                          * ms; 0 = unknown or unused */
} strata_segment;

/*
 * Copy shard's segments_per_shard segment headers into out (the caller's array of that many),
 * without a lock: each field read once, validated, and only then reported (SHARED STRUCTS,
 * segment start). Returns the time (unix ms) read after the copies, against which the starts
 * were validated: no reported start is later. Returns 0 and copies nothing for a shard out of
 * range. O(segments_per_shard).
 */
uint64_t strata_segments_get(strata_table *t, uint32_t shard, strata_segment *out);

/* This process's words in the host's counters region (counters.h): its slot's, claimed at the
 * first call in this process (a forked child claims its own), or the handle's private words
 * when every slot has a live owner. Add to them with strata_counter_add. Never NULL. */
uint64_t *strata_counter_words(strata_table *t);

struct strata_counter_totals;
/* Every slot's counters summed (strata_counter_sum). Claims nothing. */
void strata_counter_totals_get(strata_table *t, struct strata_counter_totals *out);

/* The counters region's polled_until (POLLED ITEMS; counters.h): until when (unix ms) POLLED
 * items are live, and its store. Lock-free, any process; the last store wins. */
uint64_t strata_polled_until_get(const strata_table *t);
void strata_polled_until_put(strata_table *t, uint64_t until_ms);

/*
 * The host's fill lock of key (fill_locks.h), taken for ttl_ms: STRATA_FILL_LOCK_TAKEN with
 * *token set, STRATA_FILL_LOCK_HELD (another caller fills key) or STRATA_FILL_LOCK_OTHER (the
 * key's lock word is another key's: counted as fill_lock_collisions). Lock-free, any process;
 * reads the clock once. key is not checked (1..STRATA_MAX_KEY bytes is the caller's to ensure).
 */
strata_fill_lock_answer strata_fill_lock(strata_table *t, const void *key, size_t key_len, uint64_t ttl_ms,
                                         uint64_t *token);

/* Give back key's fill lock taken as token: 1 when it was given back, 0 when it had lapsed and
 * is no longer this caller's. Lock-free, any process. */
int strata_fill_unlock(strata_table *t, const void *key, size_t key_len, uint64_t token);

/* Which shard key belongs to. */
uint32_t strata_shard_for(const strata_table *t, const void *key, size_t key_len);

/* TEST ONLY: when set, strata_open calls it at these points of every try, so a test can stop an
 * opener there (SIGSTOP) and see what other openers do meanwhile. NULL in production. */
#define STRATA_OPEN_AT_VALIDATE 1 /* the file is open; no lock is held */
#define STRATA_OPEN_AT_BUILD 2    /* the file's flock is held; it is about to be built or rebuilt */
extern void (*strata_open_test_hook)(int at);

/* TEST ONLY: take (waiting up to lock_timeout) or release a shard's lock and return. */
strata_status strata_lock_shard(strata_table *t, uint32_t shard, int wait);
strata_status strata_unlock_shard(strata_table *t, uint32_t shard);

#endif /* STRATA_TABLE_H */
