/*
 * fill_locks_test.c - the host's fill locks (fill_locks.h): taken once, given back only by their
 * holder, lapsed at their expiry, shared by keys whose hashes pick one word, never trusted when
 * damaged; one winner among racing processes; and, through the table file, a lock that
 * outlives a holder killed with SIGKILL.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../ext/strata/fill_locks.h"
#include "../../ext/strata/table.h"
#include "harness.h"


static strata_table *open_table(const char *name)
{
    strata_table *t = NULL;
    strata_options o;
    int err = 0;
    memset(&o, 0, sizeof o);
    o.size = 2u << 20;
    o.lock_timeout_ns = 50 * 1000 * 1000;
    if (strata_open(scratch_path(name), &o, &t, NULL, &err) != STRATA_OK) return NULL;
    return t;
}

static uint8_t *new_region(void)
{
    uint8_t *region = aligned_alloc(64, STRATA_FILL_LOCK_BYTES);
    if (region) memset(region, 0, STRATA_FILL_LOCK_BYTES);
    return region;
}

/* A hash whose word is slot and whose tag is tag. */
static uint64_t hash_of(uint64_t slot, uint64_t tag) { return (slot << 24) | tag; }

/* Taken once; the holder gives it back once; then it can be taken again. */
static void test_take_hold_give(void)
{
    uint8_t *region = new_region();
    uint64_t h = hash_of(7, 0x123456), token = 0, again = 0;
    REQUIRE(region);
    CHECK(strata_fill_lock_take(region, h, 1000, 2000, &token) == STRATA_FILL_LOCK_TAKEN);
    CHECK(token == 3000);
    CHECK(strata_fill_lock_take(region, h, 1001, 2000, &again) == STRATA_FILL_LOCK_HELD);
    CHECK(strata_fill_lock_give(region, h, token) == 1);
    CHECK(strata_fill_lock_give(region, h, token) == 0);
    CHECK(strata_fill_lock_take(region, h, 1002, 2000, &again) == STRATA_FILL_LOCK_TAKEN);
    CHECK(strata_fill_lock_give(region, hash_of(7, 0x654321), again) == 0); /* another key's token */
    CHECK(strata_fill_lock_give(region, h, 0) == 0);
    CHECK(strata_fill_lock_give(region, h, again) == 1);
    free(region);
}

/* A lock lapses at its expiry: the next taker takes it over, and the late holder's give leaves
 * the new holder's lock alone. */
static void test_lapse(void)
{
    uint8_t *region = new_region();
    uint64_t h = hash_of(100, 42), first = 0, second = 0;
    REQUIRE(region);
    CHECK(strata_fill_lock_take(region, h, 100, 50, &first) == STRATA_FILL_LOCK_TAKEN);
    CHECK(strata_fill_lock_take(region, h, 149, 50, &second) == STRATA_FILL_LOCK_HELD);
    CHECK(strata_fill_lock_take(region, h, 150, 50, &second) == STRATA_FILL_LOCK_TAKEN);
    CHECK(second == 200 && second != first);
    CHECK(strata_fill_lock_give(region, h, first) == 0);
    CHECK(strata_fill_lock_take(region, h, 151, 50, &first) == STRATA_FILL_LOCK_HELD);
    CHECK(strata_fill_lock_give(region, h, second) == 1);
    free(region);
}

/* Keys whose hashes pick one word: another tag is OTHER (no lock to be had), the same tag is
 * HELD; a key of another word is unaffected. */
static void test_collisions(void)
{
    uint8_t *region = new_region();
    uint64_t token = 0, other = 0;
    REQUIRE(region);
    CHECK(strata_fill_lock_take(region, hash_of(5, 1), 0, 1000, &token) == STRATA_FILL_LOCK_TAKEN);
    CHECK(strata_fill_lock_take(region, hash_of(5, 2), 0, 1000, &other) == STRATA_FILL_LOCK_OTHER);
    CHECK(strata_fill_lock_take(region, hash_of(5 + STRATA_FILL_LOCK_SLOTS, 1), 0, 1000, &other) ==
          STRATA_FILL_LOCK_HELD);
    CHECK(strata_fill_lock_take(region, hash_of(6, 2), 0, 1000, &other) == STRATA_FILL_LOCK_TAKEN);
    free(region);
}

/* TTLs are clamped to 1 ms .. STRATA_FILL_LOCK_MAX_TTL_MS; a word whose expiry lies further
 * ahead than that, or any garbage, never makes a key wait for ever: it is taken over. */
static void test_ttl_bounds_and_damage(void)
{
    uint8_t *region = new_region();
    uint64_t *words = (uint64_t *)region, token = 0;
    uint64_t garbage[] = {UINT64_MAX, 1ULL << 39, STRATA_FILL_LOCK_EXPIRES_MASK, (0xABCULL << 40) | 999999999ULL};
    REQUIRE(region);
    CHECK(strata_fill_lock_take(region, hash_of(1, 9), 500, 0, &token) == STRATA_FILL_LOCK_TAKEN && token == 501);
    CHECK(strata_fill_lock_take(region, hash_of(2, 9), 500, UINT64_MAX, &token) == STRATA_FILL_LOCK_TAKEN &&
          token == 500 + STRATA_FILL_LOCK_MAX_TTL_MS);
    for (unsigned i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        words[10 + i] = garbage[i];
        CHECK(strata_fill_lock_take(region, hash_of(10 + i, 9), 1000, 100, &token) == STRATA_FILL_LOCK_TAKEN);
        CHECK(token == 1100);
    }
    /* An expiry that would not fit 40 bits is held at the largest one, which a give matches. */
    CHECK(strata_fill_lock_take(region, hash_of(20, 9), STRATA_FILL_LOCK_EXPIRES_MASK - 10, 100, &token) ==
          STRATA_FILL_LOCK_TAKEN);
    CHECK(token == STRATA_FILL_LOCK_EXPIRES_MASK);
    CHECK(strata_fill_lock_give(region, hash_of(20, 9), token) == 1);
    free(region);
}

/* A write or delete marks the word its key's lock holds (a held or lapsed word of the key's
 * tag, not another key's, not a free one); only the holder's own token reads as marked; a
 * marked word is still held, its holder's give frees it, and a taker of a lapsed marked word
 * starts unmarked. */
static void test_marks(void)
{
    uint8_t *region = new_region();
    uint64_t h = hash_of(9, 0x77), token = 0, other = 0, later = 0;
    REQUIRE(region);
    strata_fill_lock_mark(region, hash_of(10, 1)); /* a free word: nothing to mark */
    CHECK(strata_fill_lock_take(region, hash_of(10, 1), 1000, 100, &other) == STRATA_FILL_LOCK_TAKEN);
    CHECK(!strata_fill_lock_marked(region, hash_of(10, 1), other));

    CHECK(strata_fill_lock_take(region, h, 1000, 2000, &token) == STRATA_FILL_LOCK_TAKEN);
    CHECK(!strata_fill_lock_marked(region, h, token));
    strata_fill_lock_mark(region, hash_of(9, 0x78)); /* the same word, another key's tag */
    CHECK(!strata_fill_lock_marked(region, h, token));
    strata_fill_lock_mark(region, h);
    strata_fill_lock_mark(region, h); /* twice: still marked once */
    CHECK(strata_fill_lock_marked(region, h, token));
    CHECK(!strata_fill_lock_marked(region, h, token + 1) && !strata_fill_lock_marked(region, h, 0));
    CHECK(strata_fill_lock_take(region, h, 1001, 2000, &other) == STRATA_FILL_LOCK_HELD);
    CHECK(strata_fill_lock_give(region, h, token) == 1);
    CHECK(strata_fill_lock_give(region, h, token) == 0);

    CHECK(strata_fill_lock_take(region, h, 5000, 50, &token) == STRATA_FILL_LOCK_TAKEN);
    strata_fill_lock_mark(region, h);
    CHECK(strata_fill_lock_take(region, h, 5050, 50, &later) == STRATA_FILL_LOCK_TAKEN); /* lapsed */
    CHECK(!strata_fill_lock_marked(region, h, later) && !strata_fill_lock_marked(region, h, token));
    CHECK(strata_fill_lock_give(region, h, token) == 0);
    CHECK(strata_fill_lock_give(region, h, later) == 1);
    free(region);
}

/* A sink that copies nothing: for whether a key is live. */
static void *no_copy(void *ctx, size_t len, uint64_t version)
{
    (void)ctx;
    (void)len;
    (void)version;
    return STRATA_SINK_HAVE;
}

static int live_key(strata_table *t, const char *key)
{
    strata_sink sink = {no_copy, NULL};
    return strata_get(t, key, strlen(key), &sink, NULL) == STRATA_OK;
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static strata_status write_op(strata_table *t, strata_op op, const char *key, const char *value, uint64_t ttl_ms,
                              uint64_t fill_token)
{
    strata_write_req r;
    memset(&r, 0, sizeof r);
    r.op = op;
    r.key = key;
    r.key_len = strlen(key);
    r.value = value;
    r.value_len = value ? strlen(value) : 0;
    r.ttl_ms = ttl_ms;
    r.fill_token = fill_token;
    return strata_write(t, &r, 1);
}

/* Through the table: a fill's add under its lock is refused once a delete or a set of its key
 * came after the lock was taken (the delete of an absent key, the set of one that has expired
 * since), and is stored when nothing came; an add without a token is a plain add. */
static void test_changes_refuse_fills(void)
{
    strata_table *t = open_table("marks.l1");
    uint64_t token = 0, deadline;
    REQUIRE(t);
    CHECK(strata_fill_lock(t, "k", 1, 5000, &token) == STRATA_FILL_LOCK_TAKEN);
    CHECK(write_op(t, STRATA_OP_DELETE, "k", NULL, 0, 0) == STRATA_NOT_FOUND);
    CHECK(write_op(t, STRATA_OP_ADD, "k", "old", 0, token) == STRATA_NOT_STORED);
    CHECK(strata_fill_unlock(t, "k", 1, token) == 1);

    CHECK(strata_fill_lock(t, "k", 1, 5000, &token) == STRATA_FILL_LOCK_TAKEN);
    CHECK(write_op(t, STRATA_OP_ADD, "k", "filled", 0, token) == STRATA_OK);
    CHECK(strata_fill_unlock(t, "k", 1, token) == 1);

    CHECK(strata_fill_lock(t, "s", 1, 5000, &token) == STRATA_FILL_LOCK_TAKEN);
    CHECK(write_op(t, STRATA_OP_SET, "s", "new", 1, 0) == STRATA_OK); /* lives 1 ms */
    deadline = wall_ms() + 1000;
    while (live_key(t, "s") && wall_ms() < deadline) { /* bound: 1 s, for the item's expiry */
    }
    CHECK(!live_key(t, "s"));
    CHECK(write_op(t, STRATA_OP_ADD, "s", "old", 0, token) == STRATA_NOT_STORED);
    CHECK(write_op(t, STRATA_OP_ADD, "s", "plain", 0, 0) == STRATA_OK);
    CHECK(strata_fill_unlock(t, "s", 1, token) == 1);
    strata_close(t);
}

/* Through the table: keys are hashed with the file's seed, a second handle (another process's
 * view) sees the lock, and the region lies inside the mapping, clear of the counters and index. */
static void test_through_the_table(void)
{
    strata_table *t = open_table("locks.l1"), *u = open_table("locks.l1");
    const strata_geometry *g;
    uint64_t token = 0, other = 0;
    REQUIRE(t && u);
    g = strata_geometry_of(t);
    CHECK(g->fill_locks_offset == g->counters_offset + (132u << 10));
    CHECK(g->index_offset == g->fill_locks_offset + STRATA_FILL_LOCK_BYTES);
    CHECK(strata_fill_lock(t, "k", 1, 5000, &token) == STRATA_FILL_LOCK_TAKEN);
    CHECK(strata_fill_lock(u, "k", 1, 5000, &other) == STRATA_FILL_LOCK_HELD);
    CHECK(strata_fill_lock(u, "k2", 2, 5000, &other) == STRATA_FILL_LOCK_TAKEN);
    CHECK(strata_fill_unlock(u, "k", 1, token) == 1);
    CHECK(strata_fill_unlock(t, "k", 1, token) == 0);
    CHECK(strata_fill_unlock(t, "k2", 2, other) == 1);
    strata_close(u);
    strata_close(t);
}

/* Processes released at once race for one lock word (a region shared across fork, as the
 * table's is): exactly one takes it. Each round uses a word of its own, since the winners never
 * give theirs back. */
static void test_one_winner_among_processes(void)
{
    enum { RACERS = 8, ROUNDS = 20 };
    uint8_t *region = mmap(NULL, STRATA_FILL_LOCK_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int go[2], won = 0;
    pid_t pids[RACERS];
    REQUIRE(region != MAP_FAILED);
    for (int round = 0; round < ROUNDS; round++) {
        REQUIRE(pipe(go) == 0);
        for (int i = 0; i < RACERS; i++) {
            pids[i] = fork();
            if (pids[i] == 0) {
                char c;
                uint64_t token = 0;
                close(go[1]);
                if (read(go[0], &c, 1) != 0) _exit(3); /* EOF: everyone goes at once */
                _exit(strata_fill_lock_take(region, hash_of((uint64_t)round, 77), 1000, 60000, &token) ==
                              STRATA_FILL_LOCK_TAKEN
                          ? 0
                          : 1);
            }
        }
        close(go[1]);
        won = 0;
        for (int i = 0; i < RACERS; i++) {
            int status;
            CHECK(waitpid(pids[i], &status, 0) == pids[i] && WIFEXITED(status) && WEXITSTATUS(status) != 3);
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) won++;
        }
        CHECK(won == 1);
        close(go[0]);
    }
    munmap(region, STRATA_FILL_LOCK_BYTES);
}

/* A holder killed with SIGKILL leaves its lock held: the others wait on it (and, in Ruby, poll
 * for the value up to fill_wait) until it lapses; nobody else can give it back. */
static void test_killed_holder(void)
{
    strata_table *t = open_table("killed.l1");
    int ready[2];
    pid_t pid;
    char c;
    int status;
    uint64_t token = 0;
    REQUIRE(t);
    REQUIRE(pipe(ready) == 0);
    pid = fork();
    if (pid == 0) {
        strata_table *mine = open_table("killed.l1");
        uint64_t held = 0;
        if (!mine || strata_fill_lock(mine, "held", 4, 60000, &held) != STRATA_FILL_LOCK_TAKEN) _exit(1);
        if (write(ready[1], "x", 1) != 1) _exit(1);
        pause();
        _exit(0);
    }
    CHECK(read(ready[0], &c, 1) == 1);
    kill(pid, SIGKILL);
    CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
    CHECK(strata_fill_lock(t, "held", 4, 60000, &token) == STRATA_FILL_LOCK_HELD);
    CHECK(strata_fill_unlock(t, "held", 4, 1) == 0);
    close(ready[0]);
    close(ready[1]);
    strata_close(t);
}

int main(void)
{
    if (!scratch_dir_make()) return 1;
    run("take_hold_give", test_take_hold_give);
    run("lapse", test_lapse);
    run("collisions", test_collisions);
    run("ttl_bounds_and_damage", test_ttl_bounds_and_damage);
    run("through_the_table", test_through_the_table);
    run("marks", test_marks);
    run("changes_refuse_fills", test_changes_refuse_fills);
    run("one_winner_among_processes", test_one_winner_among_processes);
    run("killed_holder", test_killed_holder);
    scratch_dir_remove();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
