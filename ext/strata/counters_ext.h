/*
 * counters_ext.h - the host's counters (counters.h) seen from Ruby. counters_ext.c gives
 * Strata::Tiers::SharedMemory and Strata::Counters::Local (a process's own counters, for a
 * store without an L1 table) the same methods, so Strata::Counters adds to either in one C call:
 *
 *   _count(index, n)             word index += n
 *   _operation(index, us)        an operation row (index: its count word): count and timed
 *                                + 1, us + us
 *   _operation_since(index, t)   _operation with us = now - t (Strata::Clock.monotonic_us)
 *   count_read_hit               the read_hit row's count + 1 (no argument: the hit path)
 *   _counter_totals              {"l1.hits" => n, ...} plus "processes", "slots_used" and
 *                                "unslotted": the table's slots summed, or the Local's words
 *
 * and defines Strata::Clock.monotonic_us (Integer microseconds, CLOCK_MONOTONIC) and, on
 * SharedMemory, COUNTER_INDEX ({"l1.hits" => 0, ...}) and COUNTER_WORDS.
 *
 * GVL: every method runs with it held, so the plain adds of strata_counter_add lose nothing to
 * other threads of the process.
 */
#ifndef STRATA_COUNTERS_EXT_H
#define STRATA_COUNTERS_EXT_H

#include "ext_common.h"

/* Defines the methods above on shared_memory (the SharedMemory class) and Strata::Counters::Local.
 * Called from strata_init_shared_memory. */
void strata_init_counters(VALUE shared_memory);

#endif
