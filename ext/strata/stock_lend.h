/*
 * stock_lend.h - Strata::ResourcePool::Stock#lend: the pool's checkout of an idle resource,
 * safe against interrupts without Thread.handle_interrupt. stock_lend.c implements it;
 * lib/strata/resource_pool/stock.rb owns the rest of the Stock (making, waiting, shutdown) and
 * documents the Ruby API; lib/strata/resource_pool.rb calls lend first and falls back to its
 * masked checkout when lend declines.
 *
 * WHY: a checkout and its return must never be split by an interrupt (Timeout, Thread#raise),
 * or the resource leaks and the pool shrinks for good. In Ruby that takes two
 * Thread.handle_interrupt blocks per checkout (interrupts held off while the resource changes
 * hands, let through while it is used), and those cost more CPU than the rest of a memcached
 * client's work on a set. Ruby runs interrupts only at its check points (a method or block
 * returning, a loop, a blocking call). This code takes the resource, sets up the block that
 * gives it back, and gives it back without reaching one, so no interrupt can land in between.
 *
 * STATE (the Stock's instance variables, read here, written by stock.rb under @lock)
 *   @lock        Mutex around every Ruby-side use of @idle, @made and @closer.
 *   @idle        Array of resources given back, last in first out.
 *   @given_back  ConditionVariable that takers waiting for a resource sleep on.
 *   @closer      nil until shutdown; then what closes a resource as it is given back.
 *
 * INVARIANTS
 *   lend runs with the GVL held and calls nothing that checks interrupts or releases the GVL
 *   between taking the resource and rb_ensure's frame being in place, nor inside the function
 *   that gives it back before the resource is in @idle again. So no other thread runs and no
 *   interrupt lands in between: the pop and the push are atomic with respect to every Ruby
 *   thread.
 *   lend touches @idle only while @lock is unlocked: a locked @lock means a thread is inside a
 *   Ruby critical section (stock.rb), which may rely on @idle not changing under it (a taker
 *   that found @idle empty and is about to wait). lend then declines (returns UNLENT) before
 *   taking, and its return path hands the resource to Stock#give_back_held instead, which
 *   waits for @lock with interrupts held off.
 *   A resource returned here is pushed before @given_back is signalled, so a taker that was
 *   waiting finds it.
 *   lend makes no resource and never waits; @made is not touched.
 */
#ifndef STRATA_STOCK_LEND_H
#define STRATA_STOCK_LEND_H

/* Defines Strata::ResourcePool::Stock#lend and Stock::UNLENT. */
void strata_init_stock_lend(void);

#endif
