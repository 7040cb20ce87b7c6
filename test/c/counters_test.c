/*
 * counters_test.c - the host's counters region of the L1 file (counters.h), through the table
 * that holds it: slots claimed per process, summed by any opener, kept when their owner closes
 * or is killed, taken over from dead owners, and never trusted when damaged.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../ext/strata/counters.h"
#include "../../ext/strata/table.h"
#include "harness.h"

#define HITS STRATA_TIER_COUNTER(STRATA_ROW_L1, STRATA_TC_HITS)
#define EVICTIONS STRATA_TIER_COUNTER(STRATA_ROW_L1, STRATA_TC_EVICTIONS)
#define FILLS (STRATA_STORE_AT + STRATA_SC_FILLS)


static strata_options opts_of(uint64_t size)
{
    strata_options o;
    memset(&o, 0, sizeof o);
    o.size = size;
    o.lock_timeout_ns = 50 * 1000 * 1000;
    return o;
}

static strata_table *open_table(const char *name)
{
    strata_table *t = NULL;
    strata_options o = opts_of(2u << 20);
    int err = 0;
    strata_status st = strata_open(scratch_path(name), &o, &t, NULL, &err);
    if (st != STRATA_OK) fprintf(stderr, "  open %s: %s\n", name, strata_strerror(st));
    return t;
}

static strata_counter_totals totals_of(strata_table *t)
{
    strata_counter_totals sums;
    strata_counter_totals_get(t, &sums);
    return sums;
}

/* The file offset of slot i's owner word. */
static off_t owner_at(strata_table *t, unsigned i)
{
    return (off_t)(strata_geometry_of(t)->counters_offset + STRATA_COUNTER_HEADER_BYTES + (uint64_t)i * STRATA_COUNTER_SLOT_BYTES);
}

static void write_at(const char *name, off_t off, uint64_t value)
{
    int fd = open(scratch_path(name), O_RDWR);
    if (fd >= 0) {
        if (pwrite(fd, &value, sizeof value, off) != (ssize_t)sizeof value) perror("pwrite");
        close(fd);
    }
}

/* A child that opens name, adds n hits and one fill, then tells the parent on fd and, when
 * linger, blocks until killed; else it closes the table and exits. */
static pid_t counting_child(const char *name, uint64_t n, int linger, int fd)
{
    pid_t pid = fork();
    if (pid == 0) {
        strata_table *t = open_table(name);
        char done = 1, never;
        uint64_t *words;
        if (!t) _exit(2);
        words = strata_counter_words(t);
        strata_counter_add(words, HITS, n);
        strata_counter_add(words, FILLS, 1);
        if (write(fd, &done, 1) != 1) _exit(3);
        if (linger) {
            if (read(fd, &never, 1) < 0) _exit(4); /* the parent never writes: blocks until killed */
        }
        strata_close(t);
        _exit(0);
    }
    return pid;
}

static void test_names(void)
{
    CHECK(strcmp(strata_counter_name(HITS), "l1.hits") == 0);
    CHECK(strcmp(strata_counter_name(STRATA_TIER_COUNTER(STRATA_ROW_SQL, STRATA_TC_ERRORS_OTHER)), "sql.errors_other") == 0);
    CHECK(strcmp(strata_counter_name(FILLS), "store.fills") == 0);
    CHECK(strcmp(strata_counter_name(STRATA_OP_COUNTER(STRATA_OPS_DELETE, STRATA_OC_US)), "op.delete.us") == 0);
    CHECK(strcmp(strata_counter_name(STRATA_TIER_COUNTER(STRATA_ROW_MEMCACHED, STRATA_MC_GUTTER_READS)),
                 "memcached.gutter_reads") == 0);
    CHECK(strcmp(strata_counter_name(STRATA_TIER_COUNTER(STRATA_ROW_MEMCACHED, STRATA_MC_RECOVERY_FLUSHES)),
                 "memcached.recovery_flushes") == 0);
    CHECK(strata_counter_name(STRATA_TIER_COUNTER(STRATA_ROW_MEMCACHED, STRATA_MC_END)) == NULL);
    CHECK(strcmp(strata_counter_name(STRATA_TIER_COUNTER(STRATA_ROW_SQL, STRATA_SQL_EXPIRY_PASSES)), "sql.expiry_passes") == 0);
    CHECK(strcmp(strata_counter_name(STRATA_TIER_COUNTER(STRATA_ROW_SQL, STRATA_SQL_EXPIRED)), "sql.expired") == 0);
    CHECK(strata_counter_name(STRATA_TIER_COUNTER(STRATA_ROW_SQL, STRATA_SQL_END)) == NULL);
    CHECK(strata_counter_name(STRATA_TIER_COUNTER(STRATA_ROW_SQL, STRATA_MC_RECOVERY_FLUSHES)) == NULL); /* memcached's only */
    CHECK(strata_counter_name(STRATA_TIER_COUNTER(STRATA_ROW_L1, STRATA_SQL_EXPIRY_PASSES)) == NULL); /* sql's only */
    CHECK(strata_counter_name(STRATA_TC_COUNT) == NULL); /* a tier row's unused word */
    CHECK(strata_counter_name(STRATA_COUNTERS - 1) == NULL);
}

/* No slot is taken until something is counted: a reader (strata stats) claims nothing. */
static void test_reader_claims_nothing(void)
{
    strata_table *t = open_table("reader.l1");
    strata_counter_totals sums;
    REQUIRE(t);
    sums = totals_of(t);
    CHECK(sums.processes == 0 && sums.slots_used == 0 && sums.counter[HITS] == 0);
    strata_close(t);
}

/* Two handles of one process take two slots; the sums add both; a closed handle's counts stay. */
static void test_handles_add_up(void)
{
    strata_table *a = open_table("handles.l1"), *b = open_table("handles.l1");
    strata_counter_totals sums;
    REQUIRE(a && b);
    strata_counter_add(strata_counter_words(a), HITS, 3);
    strata_counter_add(strata_counter_words(b), HITS, 4);
    CHECK(strata_counter_words(a) != strata_counter_words(b));
    sums = totals_of(a);
    CHECK(sums.counter[HITS] == 7 && sums.processes == 2 && sums.slots_used == 2);
    strata_close(b);
    sums = totals_of(a);
    CHECK(sums.counter[HITS] == 7 && sums.processes == 1);
    b = open_table("handles.l1"); /* takes the released slot and adds to it */
    REQUIRE(b);
    strata_counter_add(strata_counter_words(b), HITS, 1);
    sums = totals_of(a);
    CHECK(sums.counter[HITS] == 8 && sums.slots_used == 2);
    strata_close(a);
    strata_close(b);
}

/* Evictions are counted by the table itself, into the host's l1 row. */
static void test_evictions_counted(void)
{
    strata_table *t = open_table("evict.l1");
    char key[32], value[2000];
    strata_stats st;
    REQUIRE(t);
    memset(value, 'v', sizeof value);
    for (int i = 0; i < 5000; i++) {
        strata_write_req r = {.op = STRATA_OP_SET, .key = key, .value = value, .value_len = sizeof value};
        r.key_len = (size_t)snprintf(key, sizeof key, "k%d", i);
        CHECK(strata_write(t, &r, 1) == STRATA_OK);
    }
    strata_stats_get(t, &st);
    CHECK(st.counters.evictions > 0 && totals_of(t).counter[EVICTIONS] == st.counters.evictions);
    strata_close(t);
}

/* Processes add to one sum: one exits after closing, one is killed with SIGKILL while it holds
 * its slot. Both counts stay; the killed one's slot is taken over by a later process, which adds
 * to it, so the sum never goes down. */
static void test_processes_and_kill(void)
{
    strata_table *t = open_table("procs.l1");
    int fds[2][2];
    pid_t quiet, killed;
    char c;
    int status;
    strata_counter_totals sums;
    REQUIRE(t);
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds[0]) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, fds[1]) == 0);
    killed = counting_child("procs.l1", 32, 1, fds[1][1]);
    CHECK(read(fds[1][0], &c, 1) == 1); /* it holds its slot from now on: the next one takes another */
    quiet = counting_child("procs.l1", 10, 0, fds[0][1]);
    CHECK(read(fds[0][0], &c, 1) == 1);
    CHECK(waitpid(quiet, &status, 0) == quiet && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sums = totals_of(t);
    CHECK(sums.counter[HITS] == 42 && sums.counter[FILLS] == 2 && sums.processes == 1);
    kill(killed, SIGKILL);
    CHECK(waitpid(killed, &status, 0) == killed && WIFSIGNALED(status));
    sums = totals_of(t);
    CHECK(sums.counter[HITS] == 42 && sums.processes == 0 && sums.slots_used == 2);

    { /* handles of ours take the free slots (the quiet child's among them) but one; t takes that;
       * the next claim can only take the dead child's slot; the one after finds none */
        strata_table *held[STRATA_COUNTER_SLOTS];
        int n = 0;
        for (int i = 0; i < STRATA_COUNTER_SLOTS - 2; i++) {
            held[n] = open_table("procs.l1");
            if (!held[n]) break;
            strata_counter_words(held[n++]);
        }
        CHECK(n == STRATA_COUNTER_SLOTS - 2);
        CHECK(totals_of(t).slots_used == STRATA_COUNTER_SLOTS - 1);
        strata_counter_add(strata_counter_words(t), HITS, 1);
        CHECK(totals_of(t).slots_used == STRATA_COUNTER_SLOTS);
        {
            strata_table *late = open_table("procs.l1");
            REQUIRE(late);
            strata_counter_add(strata_counter_words(late), HITS, 1);
            sums = totals_of(t);
            CHECK(sums.counter[HITS] == 44 && sums.unslotted == 0);
            strata_table *extra = open_table("procs.l1");
            if (extra) {
                strata_counter_add(strata_counter_words(extra), HITS, 100);
                sums = totals_of(t);
                CHECK(sums.counter[HITS] == 44 && sums.unslotted == 1);
                strata_close(extra);
            }
            strata_close(late);
        }
        for (int i = 0; i < n; i++) strata_close(held[i]);
    }
    for (int i = 0; i < 2; i++) {
        close(fds[i][0]);
        close(fds[i][1]);
    }
    strata_close(t);
}

/* A forked child starts without a slot and claims its own (MADV_WIPEONFORK). */
static void test_fork_claims_own_slot(void)
{
    strata_table *t = open_table("fork.l1");
    pid_t pid;
    int status;
    REQUIRE(t);
    strata_counter_add(strata_counter_words(t), HITS, 5);
    pid = fork();
    if (pid == 0) {
        strata_counter_add(strata_counter_words(t), HITS, 6);
        strata_close(t);
        _exit(0);
    }
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(totals_of(t).counter[HITS] == 11);
    CHECK(totals_of(t).slots_used == 2);
    strata_close(t);
}

/* Owner words that are no pid (damage, or another writer of the file) read as dead owners:
 * never passed to kill(2), taken over by the next claim. */
static void test_damaged_owners(void)
{
    strata_table *t = open_table("damaged.l1");
    uint64_t bad[] = {UINT64_MAX, (uint64_t)1 << 40, 0x80000000u};
    REQUIRE(t);
    for (unsigned i = 0; i < STRATA_COUNTER_SLOTS; i++) write_at("damaged.l1", owner_at(t, i), bad[i % 3]);
    CHECK(totals_of(t).processes == 0);
    strata_counter_add(strata_counter_words(t), HITS, 2);
    CHECK(totals_of(t).counter[HITS] == 2 && totals_of(t).processes == 1 && totals_of(t).unslotted == 0);
    strata_close(t);
}

int main(void)
{
    if (!scratch_dir_make()) return 1;
    run("names", test_names);
    run("reader_claims_nothing", test_reader_claims_nothing);
    run("handles_add_up", test_handles_add_up);
    run("evictions_counted", test_evictions_counted);
    run("processes_and_kill", test_processes_and_kill);
    run("fork_claims_own_slot", test_fork_claims_own_slot);
    run("damaged_owners", test_damaged_owners);
    scratch_dir_remove();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
