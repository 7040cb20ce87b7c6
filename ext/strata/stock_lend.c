/*
 * stock_lend.c - Strata::ResourcePool::Stock#lend. The why and the invariants are in
 * stock_lend.h.
 */
#include "stock_lend.h"

/* Ruby's headers are not -Wextra clean; relax warnings for them only. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <ruby.h>
#pragma GCC diagnostic pop

static ID id_lock, id_idle, id_given_back, id_closer, id_signal, id_give_back_held;
static VALUE unlent;

struct loan {
    VALUE stock;
    VALUE resource;
};

static VALUE lend_yield(VALUE resource)
{
    return rb_yield(resource);
}

/* The ensure of a loan: the resource goes back to @idle, with no interrupt check before the
 * push; when that is not safe here (a Ruby critical section holds @lock, or the pool is shut
 * down) Stock#give_back_held does it. */
static VALUE lend_return(VALUE arg)
{
    struct loan *loan = (struct loan *)arg;
    VALUE stock = loan->stock;
    if (rb_mutex_locked_p(rb_ivar_get(stock, id_lock)) == Qfalse && NIL_P(rb_ivar_get(stock, id_closer))) {
        rb_ary_push(rb_ivar_get(stock, id_idle), loan->resource);
        rb_funcall(rb_ivar_get(stock, id_given_back), id_signal, 0);
    } else {
        rb_funcall(stock, id_give_back_held, 1, loan->resource);
    }
    return Qnil;
}

/* lend { |resource| ... }: yields the resource given back last and gives it back after the
 * block, returning the block's value; UNLENT, without yielding, when nothing is idle or @lock
 * is held. */
static VALUE stock_lend(VALUE self)
{
    rb_need_block();
    if (rb_mutex_locked_p(rb_ivar_get(self, id_lock)) != Qfalse) return unlent;
    VALUE resource = rb_ary_pop(rb_ivar_get(self, id_idle));
    if (NIL_P(resource)) return unlent;

    struct loan loan = {self, resource};
    return rb_ensure(lend_yield, resource, lend_return, (VALUE)&loan);
}

void strata_init_stock_lend(void)
{
    VALUE mStrata = rb_define_module("Strata");
    VALUE cPool = rb_define_class_under(mStrata, "ResourcePool", rb_cObject);
    VALUE cStock = rb_define_class_under(cPool, "Stock", rb_cObject);
    id_lock = rb_intern("@lock");
    id_idle = rb_intern("@idle");
    id_given_back = rb_intern("@given_back");
    id_closer = rb_intern("@closer");
    id_signal = rb_intern("signal");
    id_give_back_held = rb_intern("give_back_held");
    rb_gc_register_address(&unlent);
    unlent = rb_obj_freeze(rb_obj_alloc(rb_cObject));
    /* What #lend returns when it lent nothing: no block value can be this object. */
    rb_define_const(cStock, "UNLENT", unlent);
    rb_define_method(cStock, "lend", stock_lend, 0);
}
