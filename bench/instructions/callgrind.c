/*
 * callgrind.c: Strata::Bench::Callgrind, callgrind's client requests for Ruby, so the
 * instruction-count gate (bench/instructions/gate.rb) can count exactly the loop it times and
 * nothing around it: Ruby's boot, require, the stores' setup and warm-up run uninstrumented.
 *
 * Each method is one client request: a few no-op instructions natively, an order to the tool
 * under valgrind. Built by the gate at run time into tmp/ (never shipped: the gem has no use for
 * it), against the running Ruby's headers.
 */
#include <ruby.h>
#include <valgrind/callgrind.h>

/* Strata::Bench::Callgrind.running? -> true under valgrind. */
static VALUE callgrind_running_p(VALUE self) {
    (void)self;
    return RUNNING_ON_VALGRIND ? Qtrue : Qfalse;
}

/* Strata::Bench::Callgrind.start -> nil. Instruments from here on, counts from zero. */
static VALUE callgrind_start(VALUE self) {
    (void)self;
    CALLGRIND_START_INSTRUMENTATION;
    CALLGRIND_ZERO_STATS;
    return Qnil;
}

/* Strata::Bench::Callgrind.dump(label) -> nil. Writes the counts since the last zero or dump
 * to a new profile file whose "desc: Trigger: Client Request:" line is label, and zeroes them. */
static VALUE callgrind_dump(VALUE self, VALUE label) {
    (void)self;
    CALLGRIND_DUMP_STATS_AT(StringValueCStr(label));
    return Qnil;
}

/* Strata::Bench::Callgrind.stop -> nil. Back to running uninstrumented. */
static VALUE callgrind_stop(VALUE self) {
    (void)self;
    CALLGRIND_STOP_INSTRUMENTATION;
    return Qnil;
}

void Init_callgrind(void) {
    VALUE strata = rb_define_module("Strata");
    VALUE bench = rb_define_module_under(strata, "Bench");
    VALUE callgrind = rb_define_module_under(bench, "Callgrind");
    rb_define_module_function(callgrind, "running?", callgrind_running_p, 0);
    rb_define_module_function(callgrind, "start", callgrind_start, 0);
    rb_define_module_function(callgrind, "dump", callgrind_dump, 1);
    rb_define_module_function(callgrind, "stop", callgrind_stop, 0);
}
