/*
 * shared_memory_ext.h - Strata::Tiers::SharedMemory, the L1 table as a Ruby object.
 * shared_memory_ext.c implements it on table.h (the table), stamp_check.h (check_stamps) and
 * value_memo.h (each object's memo of large values); lib/strata/tiers/shared_memory.rb adds
 * option validation and documents the Ruby API. get/set are one C call from Ruby.
 *
 * GVL: reads and uncontended writes run with the GVL held (no lock is ever waited for). A write
 * whose shard lock is busy copies key and value to private memory (no lock held yet) and waits
 * for the lock and writes without the GVL, so another process's writer never waits for this
 * process's GVL. open, clear and cleanup also run without the GVL.
 *
 * CLOSE: close while a call runs without the GVL (the object's `users`) only marks the object
 * closed; the last such call to end unmaps the table. From then on every method but close and
 * closed? raises Strata::Error "closed".
 */
#ifndef STRATA_SHARED_MEMORY_EXT_H
#define STRATA_SHARED_MEMORY_EXT_H

#include "ext_common.h"

/* Defines Strata::Tiers::SharedMemory's allocator and C methods. Called from Init_strata_ext. */
void strata_init_shared_memory(void);

/* The open table of a SharedMemory; raises Strata::Error when it is closed (counters_ext.c). */
strata_table *strata_shm_table(VALUE self);

#endif
