/*
 * lock.h - the shard writer lock: a robust, process-shared, error-checking pthread mutex that
 * lives inside the mapped file.
 *
 * Who blocks whom: only writers of one shard block each other. Readers never touch the lock.
 *
 * A dead owner (a process killed while holding the lock) is handled in exactly one place,
 * strata_lock_acquire's owner-died path: the next acquirer runs the caller's recover callback
 * while holding the lock, then marks the mutex consistent. The callback must leave the shard
 * in a state that needs nothing from the dead writer (table.c drops the shard).
 *
 * A wait that runs out reports STRATA_LOCK_TIMEOUT and never forces the lock: exclusion is
 * never broken, a stopped (SIGSTOP) owner simply makes writes to its shard time out (and
 * table.c then fences their keys, so they read as misses).
 */
#ifndef STRATA_LOCK_H
#define STRATA_LOCK_H

#include <pthread.h>
#include <stdint.h>

#include "table.h"

/* Called with the lock held after its previous owner died. Must not fail. */
typedef void (*strata_lock_recover_fn)(void *ctx);

/*
 * Initialise a mutex in shared memory (process-shared, robust, error-checking).
 * Only the process that builds the file calls this, before the file is published.
 * Returns STRATA_OK or STRATA_ELOCK (errno-style code in *err).
 */
strata_status strata_lock_init(pthread_mutex_t *m, int *err);

/*
 * Take the lock.
 *   wait == 0: one trylock; STRATA_BUSY when another thread or process holds it.
 *   wait != 0: trylock, then block up to timeout_ns on CLOCK_MONOTONIC (0 = do not block).
 * On owner death runs recover(ctx) then pthread_mutex_consistent, sets *recovered = 1.
 * Returns STRATA_OK (held), STRATA_BUSY, STRATA_LOCK_TIMEOUT (also when the calling thread already
 * holds it: EDEADLK), or STRATA_ELOCK (not recoverable; the file must be rebuilt).
 * Thread rules: any thread; the lock must be released by the same thread.
 */
strata_status strata_lock_acquire(pthread_mutex_t *m, int wait, uint64_t timeout_ns,
                                  strata_lock_recover_fn recover, void *ctx, int *recovered);

/* Release a lock taken by this thread. STRATA_ELOCK if this thread does not hold it. */
strata_status strata_lock_release(pthread_mutex_t *m);

#endif /* STRATA_LOCK_H */
