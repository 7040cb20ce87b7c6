/* value_memo.c - see value_memo.h. */
#include "value_memo.h"

void value_memo_mark(const value_memo *m)
{
    if (m->entries) rb_gc_mark(m->entries);
}

int value_memo_wants(const value_memo *m, VALUE key, size_t len)
{
    /* A String subclass could hash in Ruby code; reads never call into Ruby. */
    return m->limit && len >= VALUE_MEMO_MIN && len <= m->limit && RBASIC_CLASS(key) == rb_cString;
}

VALUE value_memo_find(const value_memo *m, VALUE key, size_t len, uint64_t version)
{
    VALUE held, value;

    if (!m->entries) return Qnil;
    held = rb_hash_lookup2(m->entries, key, Qnil);
    if (NIL_P(held)) return Qnil;
    value = RARRAY_AREF(held, 0);
    if ((size_t)RSTRING_LEN(value) != len || NUM2ULL(RARRAY_AREF(held, 1)) != version) return Qnil;
    return value;
}

/* Drop key's entry, if any, and its bytes from the count. */
static void forget(value_memo *m, VALUE key)
{
    VALUE held = rb_hash_delete(m->entries, key);
    if (!NIL_P(held)) m->bytes -= (size_t)RSTRING_LEN(RARRAY_AREF(held, 0));
}

void value_memo_store(value_memo *m, VALUE key, VALUE value, uint64_t version)
{
    size_t len = (size_t)RSTRING_LEN(value);
    ID shift = rb_intern("shift");

    if (!m->entries) m->entries = rb_hash_new();
    forget(m, key); /* re-inserted at the end: the newest */
    /* Bound: each pass removes one entry; the hash is finite. */
    while (m->bytes + len > m->limit && RHASH_SIZE(m->entries) > 0) {
        VALUE oldest = rb_funcall(m->entries, shift, 0);
        m->bytes -= (size_t)RSTRING_LEN(RARRAY_AREF(RARRAY_AREF(oldest, 1), 0));
    }
    rb_obj_freeze(value);
    rb_hash_aset(m->entries, key, rb_ary_new_from_args(2, value, ULL2NUM(version)));
    m->bytes += len;
}

void value_memo_clear(value_memo *m)
{
    if (m->entries) rb_hash_clear(m->entries);
    m->bytes = 0;
}
