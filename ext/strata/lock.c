/*
 * lock.c - robust process-shared shard mutex. The contract is in lock.h.
 */
#include "lock.h"

#include <errno.h>
#include <time.h>

/* ------------------------------------------------------------------------------------------ */
/* Initialisation                                                                             */
/* ------------------------------------------------------------------------------------------ */

strata_status strata_lock_init(pthread_mutex_t *m, int *err)
{
    pthread_mutexattr_t attr;
    int rc = pthread_mutexattr_init(&attr);
    if (rc == 0) rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    if (rc == 0) rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    /* Error-checking: a thread that already holds the lock gets EDEADLK instead of hanging. */
    if (rc == 0) rc = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
    if (rc == 0) rc = pthread_mutex_init(m, &attr);
    pthread_mutexattr_destroy(&attr);
    if (rc != 0) {
        if (err) *err = rc;
        return STRATA_ELOCK;
    }
    return STRATA_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Acquire and release                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* The only place that handles EOWNERDEAD. The lock is held on entry. */
static strata_status lock_owner_died(pthread_mutex_t *m, strata_lock_recover_fn recover, void *ctx,
                                     int *recovered)
{
    if (recover) recover(ctx);
    if (pthread_mutex_consistent(m) != 0) {
        pthread_mutex_unlock(m);
        return STRATA_ELOCK;
    }
    if (recovered) *recovered = 1;
    return STRATA_OK;
}

static int lock_timed(pthread_mutex_t *m, uint64_t timeout_ns)
{
    struct timespec deadline;
    clockid_t clock = CLOCK_MONOTONIC;
#ifndef HAVE_PTHREAD_MUTEX_CLOCKLOCK
    clock = CLOCK_REALTIME;
#endif
    clock_gettime(clock, &deadline);
    deadline.tv_sec += (time_t)(timeout_ns / 1000000000u);
    deadline.tv_nsec += (long)(timeout_ns % 1000000000u);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
    }
#ifdef HAVE_PTHREAD_MUTEX_CLOCKLOCK
    return pthread_mutex_clocklock(m, clock, &deadline);
#else
    return pthread_mutex_timedlock(m, &deadline);
#endif
}

strata_status strata_lock_acquire(pthread_mutex_t *m, int wait, uint64_t timeout_ns,
                                  strata_lock_recover_fn recover, void *ctx, int *recovered)
{
    int rc = pthread_mutex_trylock(m);
    if (rc == EBUSY) {
        if (!wait) return STRATA_BUSY;
        if (timeout_ns == 0) return STRATA_LOCK_TIMEOUT;
        rc = lock_timed(m, timeout_ns);
    }
    switch (rc) {
    case 0:
        return STRATA_OK;
    case EOWNERDEAD:
        return lock_owner_died(m, recover, ctx, recovered);
    case ETIMEDOUT:
    case EDEADLK:
        return STRATA_LOCK_TIMEOUT;
    default: /* ENOTRECOVERABLE, EINVAL: the mutex is unusable. */
        return STRATA_ELOCK;
    }
}

strata_status strata_lock_release(pthread_mutex_t *m)
{
    return pthread_mutex_unlock(m) == 0 ? STRATA_OK : STRATA_ELOCK;
}
