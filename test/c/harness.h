/*
 * harness.h - the few macros the C tests share: CHECK (record a failure, go on), REQUIRE
 * (record a failure, return from the test) and run (one named test, "ok"/"not ok" on stdout).
 * Each test program includes it once; main reports passed and failed.
 */
#ifndef STRATA_TEST_HARNESS_H
#define STRATA_TEST_HARNESS_H

#include <stdio.h>

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


#endif
