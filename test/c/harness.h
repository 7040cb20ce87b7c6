/*
 * harness.h - the few macros the C tests share: CHECK (record a failure, go on), REQUIRE
 * (record a failure, return from the test) and run (one named test, "ok"/"not ok" on stdout).
 * Each test program includes it once; main reports passed and failed.
 */
#ifndef STRATA_TEST_HARNESS_H
#define STRATA_TEST_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int passed, failed, current_failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                      \
            current_failed = 1;                                                                    \
        }                                                                                          \
    } while (0)

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                      \
            current_failed = 1;                                                                    \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static void run(const char *name, void (*fn)(void))
{
    current_failed = 0;
    fn();
    if (current_failed) {
        failed++;
        printf("not ok  %s\n", name);
    } else {
        passed++;
        printf("ok      %s\n", name);
    }
    fflush(stdout);
}

/* The test program's scratch directory under /tmp: scratch_dir_make makes it (0: it could not,
 * reported), scratch_path names a file in it (four rotating buffers, so a call may pass two),
 * scratch_dir_remove removes it with everything in it. */
static char scratch_dir[64];

static inline int scratch_dir_make(void)
{
    snprintf(scratch_dir, sizeof scratch_dir, "/tmp/strata-ctest-XXXXXX");
    if (mkdtemp(scratch_dir)) return 1;
    perror("mkdtemp");
    return 0;
}

static inline char *scratch_path(const char *name)
{
    static char buf[4][128];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, 128, "%s/%s", scratch_dir, name);
    return p;
}

static inline void scratch_dir_remove(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", scratch_dir);
}

#endif
