/*
 * counters_ext.c - the host's counters' Ruby methods; see counters_ext.h. No counting logic
 * lives here (counters.h).
 */
#include "counters_ext.h"
#include "counters.h"
#include "shared_memory_ext.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <ruby.h>
#pragma GCC diagnostic pop

#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------------------------ */
/* Strata::Counters::Local: one process's words                                               */
/* ------------------------------------------------------------------------------------------ */

typedef struct local_counters {
    uint64_t words[STRATA_COUNTERS];
} local_counters;

static size_t local_memsize(const void *p)
{
    (void)p;
    return sizeof(local_counters);
}

static const rb_data_type_t local_type = {
    .wrap_struct_name = "Strata::Counters::Local",
    .function = {.dmark = NULL, .dfree = RUBY_TYPED_DEFAULT_FREE, .dsize = local_memsize},
    .flags = RUBY_TYPED_FREE_IMMEDIATELY | RUBY_TYPED_WB_PROTECTED,
};

static VALUE local_alloc(VALUE klass)
{
    local_counters *l;
    return TypedData_Make_Struct(klass, local_counters, &local_type, l);
}

/* The words self adds to: a Local's own, or the table's slot for this process. */
static uint64_t *words_of(VALUE self)
{
    if (RTYPEDDATA_P(self) && RTYPEDDATA_TYPE(self) == &local_type) return ((local_counters *)RTYPEDDATA_DATA(self))->words;
    return strata_counter_words(strata_shm_table(self));
}

/* ------------------------------------------------------------------------------------------ */
/* Adding                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static uint64_t monotonic_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t count_of(VALUE n, const char *name)
{
    if (!RB_INTEGER_TYPE_P(n)) rb_raise(rb_eTypeError, "%s must be an Integer", name);
    if (FIXNUM_P(n) ? FIX2LONG(n) < 0 : RBIGNUM_NEGATIVE_P(n)) rb_raise(rb_eArgError, "%s must be >= 0", name);
    return NUM2ULL(n);
}

static unsigned counter_arg(VALUE index)
{
    long i = NUM2LONG(index);
    if (i < 0 || i >= STRATA_COUNTERS || strata_counter_name((unsigned)i) == NULL)
        rb_raise(rb_eArgError, "no counter %ld", i);
    return (unsigned)i;
}

static unsigned operation_arg(VALUE index)
{
    long i = NUM2LONG(index);
    if (i < STRATA_OPS_AT || i >= STRATA_OPS_AT + STRATA_OPS_ROWS * STRATA_OP_WORDS || (i - STRATA_OPS_AT) % STRATA_OP_WORDS != 0)
        rb_raise(rb_eArgError, "no operation at %ld", i);
    return (unsigned)i;
}

static VALUE counters_count(VALUE self, VALUE index, VALUE n)
{
    unsigned i = counter_arg(index);
    uint64_t by = count_of(n, "n");
    strata_counter_add(words_of(self), i, by);
    return Qnil;
}

static void add_operation(VALUE self, unsigned i, uint64_t us)
{
    uint64_t *words = words_of(self);
    strata_counter_add(words, i + STRATA_OC_COUNT, 1);
    strata_counter_add(words, i + STRATA_OC_TIMED, 1);
    strata_counter_add(words, i + STRATA_OC_US, us);
}

static VALUE counters_operation(VALUE self, VALUE index, VALUE us)
{
    unsigned i = operation_arg(index);
    add_operation(self, i, count_of(us, "us"));
    return Qnil;
}

static VALUE counters_operation_since(VALUE self, VALUE index, VALUE started)
{
    unsigned i = operation_arg(index);
    uint64_t from = count_of(started, "started"), now = monotonic_us();
    add_operation(self, i, now > from ? now - from : 0);
    return Qnil;
}

/* No argument to convert: this runs on every hit the store answers from the table. */
static VALUE counters_count_read_hit(VALUE self)
{
    strata_counter_add(words_of(self), STRATA_OP_COUNTER(STRATA_OPS_READ_HIT, STRATA_OC_COUNT), 1);
    return Qnil;
}

static VALUE clock_monotonic_us(VALUE self)
{
    (void)self;
    return ULL2NUM(monotonic_us());
}

/* ------------------------------------------------------------------------------------------ */
/* Reading                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static VALUE totals_hash(const strata_counter_totals *sums)
{
    VALUE h = rb_hash_new();
    for (unsigned i = 0; i < STRATA_COUNTERS; i++) {
        const char *name = strata_counter_name(i);
        if (name) rb_hash_aset(h, rb_str_new_cstr(name), ULL2NUM(sums->counter[i]));
    }
    rb_hash_aset(h, rb_str_new_cstr("processes"), UINT2NUM(sums->processes));
    rb_hash_aset(h, rb_str_new_cstr("slots_used"), UINT2NUM(sums->slots_used));
    rb_hash_aset(h, rb_str_new_cstr("unslotted"), ULL2NUM(sums->unslotted));
    return h;
}

/* The table's slots summed: O(slots x counters) loads and a kill(2) per owned slot, with the
 * GVL held (microseconds). Claims no slot. */
static VALUE shm_counter_totals(VALUE self)
{
    strata_counter_totals sums;
    strata_counter_totals_get(strata_shm_table(self), &sums);
    return totals_hash(&sums);
}

static VALUE local_counter_totals(VALUE self)
{
    strata_counter_totals sums;
    memcpy(sums.counter, words_of(self), sizeof sums.counter);
    sums.processes = 1;
    sums.slots_used = 1;
    sums.unslotted = 0;
    return totals_hash(&sums);
}

/* {"l1.hits" => 0, ...}: the index of every named counter word. */
static VALUE counter_index(void)
{
    VALUE h = rb_hash_new();
    for (unsigned i = 0; i < STRATA_COUNTERS; i++) {
        const char *name = strata_counter_name(i);
        if (name) rb_hash_aset(h, rb_obj_freeze(rb_str_new_cstr(name)), UINT2NUM(i));
    }
    return rb_obj_freeze(h);
}

void strata_init_counters(VALUE shared_memory)
{
    VALUE mStrata = rb_define_module("Strata");
    VALUE local = rb_define_class_under(rb_define_class_under(mStrata, "Counters", rb_cObject), "Local", rb_cObject);
    VALUE classes[2] = {shared_memory, local};

    rb_define_alloc_func(local, local_alloc);
    for (int k = 0; k < 2; k++) {
        rb_define_method(classes[k], "_count", counters_count, 2);
        rb_define_method(classes[k], "_operation", counters_operation, 2);
        rb_define_method(classes[k], "_operation_since", counters_operation_since, 2);
        rb_define_method(classes[k], "count_read_hit", counters_count_read_hit, 0);
    }
    rb_define_method(shared_memory, "_counter_totals", shm_counter_totals, 0);
    rb_define_method(local, "_counter_totals", local_counter_totals, 0);
    rb_define_const(shared_memory, "COUNTER_INDEX", counter_index());
    rb_define_const(shared_memory, "COUNTER_WORDS", INT2FIX(STRATA_COUNTERS));
    rb_define_module_function(rb_define_module_under(mStrata, "Clock"), "monotonic_us", clock_monotonic_us, 0);
}
