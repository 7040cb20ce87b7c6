/*
 * ext_common.h - helpers of the Ruby bindings, kept out of any one room's file: the key check
 * and a value's bytes for a table write (shared_memory_ext.c), and the lookup of the Ruby
 * classes defined in lib/ (Strata's error classes, wire.c's too; Strata::Entry::Split).
 * ext_common.c holds the out-of-line parts.
 *
 * The key check and the String case of the value are on every get and set, so they are
 * inline here. The classes are looked up out of line when first needed: they are defined in
 * Ruby (lib/strata/errors.rb, entry.rb, meta/wire.rb), not by the extension, and need not exist
 * when it loads (shared_memory.rb loads entry.rb and errors.rb before it).
 */
#ifndef STRATA_EXT_COMMON_H
#define STRATA_EXT_COMMON_H

#include "table.h"

/* Ruby's headers are not -Wextra clean; relax warnings for them only. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <ruby.h>
#pragma GCC diagnostic pop

/* The class at a Ruby path such as "Strata::TierError"; raises NameError when it is not
 * defined. Looked up at each call: only a raise asks. */
VALUE strata_error_class(const char *name);

/* Strata::Entry::Split (lib/strata/entry.rb), looked up on first use and kept from then on
 * (registered with the GC). */
VALUE strata_split_class(void);

/* Raises ArgumentError or TypeError unless key is a String of 1..STRATA_MAX_KEY bytes. */
static inline void strata_check_key(VALUE key)
{
    long len;
    if (NIL_P(key)) rb_raise(rb_eArgError, "key is nil");
    if (!RB_TYPE_P(key, T_STRING)) rb_raise(rb_eTypeError, "key must be a String, not %s", rb_obj_classname(key));
    len = RSTRING_LEN(key);
    if (len == 0) rb_raise(rb_eArgError, "key is empty");
    if (len > STRATA_MAX_KEY) rb_raise(rb_eArgError, "key is %ld bytes; keys are at most %d bytes", len, STRATA_MAX_KEY);
}

/* Puts value's bytes into req: a String whole, or a Strata::Entry::Split as head and payload,
 * both Strings, which the table copies into the item one after the other (table.h). The
 * Strings are read, never kept: the caller keeps value alive across the write. Raises
 * TypeError for anything else. */
static inline void strata_value_into(VALUE value, strata_write_req *req)
{
    VALUE head, payload;

    if (RB_TYPE_P(value, T_STRING)) {
        req->value = RSTRING_PTR(value);
        req->value_len = (size_t)RSTRING_LEN(value);
        return;
    }
    if (RB_TYPE_P(value, T_STRUCT) && rb_obj_is_kind_of(value, strata_split_class())) {
        head = RSTRUCT_GET(value, 0);
        payload = RSTRUCT_GET(value, 1);
        if (!RB_TYPE_P(head, T_STRING) || !RB_TYPE_P(payload, T_STRING))
            rb_raise(rb_eTypeError, "a Strata::Entry::Split holds two Strings");
        req->head = RSTRING_PTR(head);
        req->head_len = (size_t)RSTRING_LEN(head);
        req->value = RSTRING_PTR(payload);
        req->value_len = (size_t)RSTRING_LEN(payload);
        return;
    }
    rb_raise(rb_eTypeError, "value must be a String, not %s", rb_obj_classname(value));
}

#endif
