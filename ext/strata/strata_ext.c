/*
 * strata_ext.c - the extension's entry point. Init_strata_ext, run by
 * `require "strata/strata_ext"`, calls each room's init; the rooms' code lives in their files:
 *
 *   L1 table            Strata::Tiers::SharedMemory    shared_memory_ext.{h,c} (the binding,
 *                                                      check_stamps included) over table.{h,c},
 *                                                      lock.{h,c}, hash.h, stamp_check.{h,c}
 *   value memo          per-process memo of large L1   value_memo.{h,c}
 *                       values, one per SharedMemory
 *   memcached stream    Strata::Meta::Wire             wire.{h,c} over byte_buffer.{h,c}
 *   pool loan           Strata::ResourcePool::Stock    stock_lend.{h,c}
 *                       #lend and Stock::UNLENT
 *   host counters       SharedMemory#_count ...,       shared_memory_ext.c over counters.{h,c}
 *                       Strata::Clock.monotonic_us
 *
 * ext_common.{h,c} holds the bindings' helpers: the key check, a value's bytes for a table
 * write, and the lookup of the classes lib/ defines (Strata's error classes,
 * Strata::Entry::Split).
 */
#include "shared_memory_ext.h"
#include "stock_lend.h"
#include "value_memo.h"
#include "wire.h"

void Init_strata_ext(void)
{
    strata_init_shared_memory();
    value_memo_init();
    strata_init_wire();
    strata_init_stock_lend();
}
