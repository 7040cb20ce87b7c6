/* ext_common.c - the class lookups the bindings share; see ext_common.h. */
#include "ext_common.h"

VALUE strata_error_class(const char *name) { return rb_path2class(name); }

/* Set once, with the GVL held; registered with the GC so the class stays marked. */
static VALUE split_class = Qnil;

VALUE strata_split_class(void)
{
    if (NIL_P(split_class)) {
        split_class = rb_path2class("Strata::Entry::Split");
        rb_gc_register_address(&split_class);
    }
    return split_class;
}
