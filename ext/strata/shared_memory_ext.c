/*
 * shared_memory_ext.c - Strata::Tiers::SharedMemory, the L1 table's Ruby binding: argument
 * conversion, the GVL, and mapping strata_status to exceptions; see shared_memory_ext.h. No
 * table logic lives here (table.h).
 */
#include "shared_memory_ext.h"
#include "counters_ext.h"
#include "ext_common.h"
#include "table.h"
#include "counters.h"
#include "stamp_check.h"
#include "value_memo.h"

/* Ruby's headers are not -Wextra clean; relax warnings for them only. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <ruby.h>
#include <ruby/thread.h>
#include <ruby/encoding.h>
#pragma GCC diagnostic pop

#include <errno.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* The Ruby object                                                                            */
/* ------------------------------------------------------------------------------------------ */

#define SHM_OLD_TABLES 8 /* retired tables kept mapped until the calls using them end */
#define SHM_REOPEN_TRIES 2 /* a table that is retired again at once is a miss, not a loop */

/* A rebuild by another process retires the table (strata_retired): every call takes the handle
 * through shm_open_handle, which opens the path again when the table is retired, and the reads,
 * writes and stamp checks look again after their work and, when it was done on a table retired
 * meanwhile, open the new one and do it again there. The reopen holds the GVL (at most the
 * flock wait, plus a build when the file at path needs one): a rebuild is rare. */
typedef struct shm {
    strata_table *t;
    const uint32_t *state; /* t's header state word (strata_state_word), loaded by every call */
    int users;  /* calls running without the GVL; close defers the unmap until they end */
    int closed;
    value_memo memo; /* large values already read, by key (value_memo.h) */
    strata_tag_keys tag_format; /* how tag version keys are made (version_key_prefix=); none: no check settles */
    strata_key_memo tag_keys; /* the hashes of tag version keys checked lately (stamp_check.h) */
    char *path;                /* t's path, for a reopen */
    strata_options opts;       /* t's options, adopt set: a reopen takes the file's geometry */
    uint64_t reopens;          /* tables this handle opened again after a rebuild retired them */
    int old_count;
    strata_table *old[SHM_OLD_TABLES]; /* retired, unmapped once users is 0 */
} shm;

/* strata_retired, inline: the hot paths' check. */
static inline int word_retired(const uint32_t *state)
{
    return __builtin_expect(__atomic_load_n(state, __ATOMIC_SEQ_CST) == STRATA_STATE_RETIRED, 0);
}

static void shm_close_old(shm *s)
{
    /* Bound: SHM_OLD_TABLES. */
    for (int i = 0; i < s->old_count; i++) strata_close(s->old[i]);
    s->old_count = 0;
}

/* Also drops the memo's entries that have lived through enough collections (value_memo.h). */
static void shm_mark(void *p)
{
    value_memo_mark(&((shm *)p)->memo);
}

static void shm_free(void *p)
{
    shm *s = p;
    if (s->t) strata_close(s->t);
    shm_close_old(s);
    value_memo_free(&s->memo);
    free(s->path);
    xfree(s);
}

static size_t shm_memsize(const void *p)
{
    return sizeof(shm) + value_memo_memsize(&((const shm *)p)->memo);
}

static const rb_data_type_t shm_type = {
    .wrap_struct_name = "Strata::Tiers::SharedMemory",
    .function = {.dmark = shm_mark, .dfree = shm_free, .dsize = shm_memsize},
    /* Not RUBY_TYPED_WB_PROTECTED, and it must stay so. The memo stores Strings into its slots
     * with plain C stores (no RB_OBJ_WRITE): safe only because the GC treats an unprotected
     * object as one that may point anywhere and marks it at every collection. The memo's aging
     * (value_memo.h, BOUNDS) counts on that too: value_memo_mark must run at every collection,
     * minor ones included, but an old protected object is marked by a minor one only when a
     * write barrier has remembered it. Adding the flag would need RB_OBJ_WRITE at every store
     * and another way to age the memo. */
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static VALUE shm_alloc(VALUE klass)
{
    shm *s;
    return TypedData_Make_Struct(klass, shm, &shm_type, s);
}

/* t becomes the handle's table, its state word the one every call loads. */
static void shm_attach(shm *s, strata_table *t)
{
    s->t = t;
    s->state = strata_state_word(t);
}

/* s->t is retired: open s->path again (adopting the geometry of the file there) and use that.
 * 0 when it could not be opened; s->t is then still the retired table, which callers must not
 * answer from. The old table is unmapped now, or by the last call still using it without the
 * GVL (nogvl_done); past SHM_OLD_TABLES such tables it stays mapped for the process's life. */
static int shm_reopen(shm *s)
{
    strata_table *t = NULL;
    const char *reason = NULL;
    int err = 0;

    if (s->path == NULL || strata_open(s->path, &s->opts, &t, &reason, &err) != STRATA_OK) return 0;
    if (s->users == 0)
        strata_close(s->t);
    else if (s->old_count < SHM_OLD_TABLES)
        s->old[s->old_count++] = s->t;
    shm_attach(s, t);
    s->reopens++;
    value_memo_clear(&s->memo); /* versions are per file */
    memset(&s->tag_keys, 0, sizeof s->tag_keys); /* hashes are per file (its seed) */
    return 1;
}

/* The open table behind self; raises Strata::Error "closed" after close, and Strata::TierError
 * when a rebuild retired it and the new file can't be opened. */
static shm *shm_open_handle(VALUE self)
{
    shm *s;
    TypedData_Get_Struct(self, shm, &shm_type, s);
    if (s->t == NULL || s->closed) {
        rb_raise(strata_error_class("Strata::Error"), s->closed ? "closed" : "not opened");
    }
    if (word_retired(s->state) && !shm_reopen(s))
        rb_raise(strata_error_class("Strata::TierError"), "%s", strata_strerror(STRATA_ERETIRED));
    return s;
}

/* After work done on t, found retired (word_retired) since: 1 when s now has the new table, so
 * the work is to be done again. tries counts the times it answered 1 for this work: past
 * SHM_REOPEN_TRIES, or when the new file can't be opened, *st becomes STRATA_ERETIRED and it
 * answers 0 (the work's result is not to be used). */
static int shm_redo(shm *s, strata_table *t, int *tries, strata_status *st)
{
    if (s->t != t) return ++*tries <= SHM_REOPEN_TRIES; /* another thread reopened meanwhile */
    if (++*tries <= SHM_REOPEN_TRIES && shm_reopen(s)) return 1;
    *st = STRATA_ERETIRED;
    return 0;
}

strata_table *strata_shm_table(VALUE self) { return shm_open_handle(self)->t; }

/* ------------------------------------------------------------------------------------------ */
/* The host's counters (counters.h)                                                           */
/* ------------------------------------------------------------------------------------------ */

/* Count one c in the L1 row of the host's counters, for a cache key: the stack's own keys (host
 * locks, tag versions, the poller's) start with a NUL byte and are not the app's reads. */
static inline void count_l1(shm *s, const char *key, enum strata_tier_counter c)
{
    if (key[0] != 0) strata_counter_add(strata_counter_words(s->t), STRATA_TIER_COUNTER(STRATA_ROW_L1, c), 1);
}

/* A write's outcome in the L1 row: stored, refused (not stored, a lock that timed out, a value
 * too large), or a failure of the table. */
static void count_l1_write(shm *s, const char *key, strata_status st)
{
    switch (st) {
    case STRATA_OK:
        count_l1(s, key, STRATA_TC_WRITES);
        break;
    case STRATA_NOT_STORED:
    case STRATA_TOO_LARGE:
    case STRATA_BUSY:
        count_l1(s, key, STRATA_TC_WRITES_REFUSED);
        break;
    case STRATA_LOCK_TIMEOUT:
        count_l1(s, key, STRATA_TC_WRITES_REFUSED);
        count_l1(s, key, STRATA_TC_ERRORS_TIMEOUT);
        break;
    case STRATA_NOT_FOUND:
    case STRATA_NOT_NUMBER:
    case STRATA_EINVAL:
        break;
    default:
        count_l1(s, key, STRATA_TC_ERRORS_OTHER);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Running without the GVL                                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct nogvl_call {
    shm *s;
    void *(*fn)(void *);
    void *arg;
} nogvl_call;

static VALUE nogvl_body(VALUE p)
{
    nogvl_call *c = (nogvl_call *)p;
    rb_thread_call_without_gvl(c->fn, c->arg, NULL, NULL);
    return Qnil;
}

static VALUE nogvl_done(VALUE p)
{
    nogvl_call *c = (nogvl_call *)p;
    if (c->s && --c->s->users == 0) {
        shm_close_old(c->s);
        if (c->s->closed && c->s->t) {
            strata_close(c->s->t);
            c->s->t = NULL;
        }
    }
    return Qnil;
}

/* Run fn(arg) without the GVL. The wait inside fn is bounded (lock_timeout, flock wait), so no
 * unblock function is needed. An interrupt raised on return still lets close finish. */
static void run_without_gvl(shm *s, void *(*fn)(void *), void *arg)
{
    nogvl_call c = {s, fn, arg};
    if (s) s->users++;
    rb_ensure(nogvl_body, (VALUE)&c, nogvl_done, (VALUE)&c);
}

/* ------------------------------------------------------------------------------------------ */
/* Argument conversion                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Longer TTLs are capped here (about 31,000 years), so now + ttl never overflows. */
#define TTL_MAX_SECONDS 1000000000000L

/* nil or 0 = never; positive Integer or Float seconds, rounded up to whole milliseconds. */
static uint64_t ttl_ms_of(VALUE ttl)
{
    if (NIL_P(ttl) || ttl == Qundef) return 0;
    if (FIXNUM_P(ttl)) {
        long secs = FIX2LONG(ttl);
        if (secs < 0) rb_raise(rb_eArgError, "ttl must be >= 0");
        return secs > TTL_MAX_SECONDS ? (uint64_t)TTL_MAX_SECONDS * 1000u : (uint64_t)secs * 1000u;
    }
    if (RB_INTEGER_TYPE_P(ttl)) { /* a Bignum */
        if (RTEST(rb_funcall(ttl, '<', 1, INT2FIX(0)))) rb_raise(rb_eArgError, "ttl must be >= 0");
        return (uint64_t)TTL_MAX_SECONDS * 1000u;
    }
    if (RB_FLOAT_TYPE_P(ttl)) {
        double f = RFLOAT_VALUE(ttl);
        if (isnan(f) || f < 0) rb_raise(rb_eArgError, "ttl must be >= 0");
        if (f > (double)TTL_MAX_SECONDS) return (uint64_t)TTL_MAX_SECONDS * 1000u;
        return (uint64_t)ceil(f * 1000.0);
    }
    rb_raise(rb_eTypeError, "ttl must be an Integer or Float, not %s", rb_obj_classname(ttl));
    return 0;
}

static uint64_t u64_of(VALUE v, const char *name)
{
    if (!RB_INTEGER_TYPE_P(v)) rb_raise(rb_eTypeError, "%s must be an Integer", name);
    /* The sign is read, not asked for: no Ruby method runs while a caller may hold a handle. */
    if (FIXNUM_P(v) ? FIX2LONG(v) < 0 : RBIGNUM_NEGATIVE_P(v)) rb_raise(rb_eArgError, "%s must be >= 0", name);
    return NUM2ULL(v);
}

/* The ttl: keyword, the only one set/add/cas take, from the keyword Hash the call was given
 * (nil for none). Looked up, not extracted: rb_get_kwargs takes the Hash apart, which is why
 * rb_scan_args copies it first, a second Hash on every write. Anything besides ttl: goes to
 * rb_get_kwargs on a copy, for its ArgumentError. */
static uint64_t ttl_kw(VALUE opts)
{
    ID ids[1];
    VALUE vals[1];
    if (NIL_P(opts)) return 0;
    ids[0] = rb_intern("ttl");
    vals[0] = rb_hash_lookup2(opts, ID2SYM(ids[0]), Qundef);
    if (RHASH_SIZE(opts) != (vals[0] == Qundef ? 0u : 1u)) rb_get_kwargs(rb_hash_dup(opts), ids, 0, 1, vals);
    return ttl_ms_of(vals[0]);
}

/* Split set/add/cas's arguments: the keyword Hash, if keywords were given, into *opts (else
 * nil), and exactly n positional arguments into out. rb_scan_args would copy the Hash. */
static void store_args(int argc, VALUE *argv, int n, VALUE *out, VALUE *opts)
{
    *opts = Qnil;
    if (argc > 0 && rb_keyword_given_p()) *opts = argv[--argc];
    rb_check_arity(argc, n, n);
    for (int i = 0; i < n; i++) out[i] = argv[i];
}

/* ------------------------------------------------------------------------------------------ */
/* Status to Ruby                                                                             */
/* ------------------------------------------------------------------------------------------ */

static void raise_write_error(shm *s, strata_status st, const strata_write_req *req)
{
    switch (st) {
    case STRATA_TOO_LARGE:
        rb_raise(strata_error_class("Strata::ValueTooLargeError"),
                 "key + value are %zu bytes; max_value_size is %llu", req->key_len + req->head_len + req->value_len,
                 (unsigned long long)strata_geometry_of(s->t)->max_value_size);
    case STRATA_LOCK_TIMEOUT:
    case STRATA_BUSY:
        rb_raise(strata_error_class("Strata::RetryableError"), "%s", strata_strerror(STRATA_LOCK_TIMEOUT));
    case STRATA_EINVAL:
        rb_raise(rb_eArgError, "%s", strata_strerror(st));
    default:
        rb_raise(strata_error_class("Strata::TierError"), "%s", strata_strerror(st));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Writes                                                                                     */
/* ------------------------------------------------------------------------------------------ */

typedef struct write_call {
    strata_table *t;
    strata_write_req *req;
    strata_status st;
} write_call;

static void *write_blocking(void *p)
{
    write_call *w = p;
    w->st = strata_write(w->t, w->req, 1);
    return NULL;
}

/* req on t: try the shard lock with the GVL held (unless tried, with st its answer); if it is
 * busy, copy key and value (the Ruby strings may change or move once the GVL is released) into
 * *tmp, once, point req at the copy, and wait for it without the GVL. */
static strata_status shm_write_on(shm *s, strata_table *t, strata_write_req *req, VALUE *tmp, int tried,
                                  strata_status st)
{
    char *copy;
    write_call w;

    if (!tried) st = strata_write(t, req, 0);
    if (st != STRATA_BUSY) return st;
    if (*tmp == 0) {
        copy = ALLOCV(*tmp, req->key_len + req->head_len + req->value_len + 1);
        memcpy(copy, req->key, req->key_len);
        if (req->head_len) memcpy(copy + req->key_len, req->head, req->head_len);
        if (req->value_len) memcpy(copy + req->key_len + req->head_len, req->value, req->value_len);
        req->key = copy;
        req->value = copy + req->key_len;
        req->value_len += req->head_len;
        req->head = NULL;
        req->head_len = 0;
    }
    w.t = t;
    w.req = req;
    w.st = STRATA_BUSY;
    run_without_gvl(s, write_blocking, &w);
    return w.st;
}

/* The write req on s's table, done again on the new table when a rebuild retired it meanwhile
 * (shm_redo): a write or delete that landed in the old file after the rename is not lost. */
static strata_status shm_write(shm *s, strata_write_req *req)
{
    VALUE tmp = 0;
    strata_table *t = s->t;
    const uint32_t *state = s->state;
    strata_status st = strata_write(t, req, 0);
    int tries = 0, tried = 1;

    if (st != STRATA_BUSY && !word_retired(state)) return st; /* the usual case */
    /* Bound: SHM_REOPEN_TRIES + 1 writes. */
    for (;;) {
        st = shm_write_on(s, t, req, &tmp, tried, st);
        if (!word_retired(state) || !shm_redo(s, t, &tries, &st)) break;
        t = s->t;
        state = s->state;
        tried = 0;
    }
    if (tmp) ALLOCV_END(tmp);
    return st;
}

/* set/add/cas: true when stored, false when not stored or the lock timed out. */
static VALUE shm_store(VALUE self, strata_op op, VALUE key, VALUE value, uint64_t ttl_ms, uint64_t cas,
                       unsigned flags, uint64_t fill_token)
{
    shm *s = shm_open_handle(self);
    strata_write_req req = {0};
    strata_status st;

    strata_check_key(key);
    strata_value_into(value, &req);
    req.op = op;
    req.key = RSTRING_PTR(key);
    req.key_len = (size_t)RSTRING_LEN(key);
    req.ttl_ms = ttl_ms;
    req.cas = cas;
    req.flags = flags;
    req.fill_token = fill_token;
    st = shm_write(s, &req);
    count_l1_write(s, RSTRING_PTR(key), st);
    RB_GC_GUARD(key);
    RB_GC_GUARD(value);
    switch (st) {
    case STRATA_OK:
        return Qtrue;
    case STRATA_NOT_STORED:
    case STRATA_LOCK_TIMEOUT:
    case STRATA_BUSY:
        return Qfalse;
    default:
        raise_write_error(s, st, &req);
        return Qnil;
    }
}

/* set(key, bytes, ttl: nil) */
static VALUE shm_set(int argc, VALUE *argv, VALUE self)
{
    VALUE args[2], opts;
    store_args(argc, argv, 2, args, &opts);
    return shm_store(self, STRATA_OP_SET, args[0], args[1], ttl_kw(opts), 0, 0, 0);
}

/* add(key, bytes, ttl: nil) */
static VALUE shm_add(int argc, VALUE *argv, VALUE self)
{
    VALUE args[2], opts;
    store_args(argc, argv, 2, args, &opts);
    return shm_store(self, STRATA_OP_ADD, args[0], args[1], ttl_kw(opts), 0, 0, 0);
}

/* add_for_fill(key, bytes, token, ttl: nil): the add of a read-through's fill (Tier#add_for_fill);
 * token is the key's fill lock token (lock_fill's) when the fill holds it, else nil. Refused
 * (false) when a set or delete of the key marked that lock since it was taken (fill_locks.h). */
static VALUE shm_add_for_fill(int argc, VALUE *argv, VALUE self)
{
    VALUE args[3], opts;
    uint64_t ttl, token;
    store_args(argc, argv, 3, args, &opts);
    ttl = ttl_kw(opts);
    token = NIL_P(args[2]) ? 0 : u64_of(args[2], "token");
    return shm_store(self, STRATA_OP_ADD, args[0], args[1], ttl, 0, 0, token);
}

/* cas(key, bytes, token, ttl: nil) */
static VALUE shm_cas(int argc, VALUE *argv, VALUE self)
{
    VALUE args[3], opts;
    uint64_t ttl;
    store_args(argc, argv, 3, args, &opts);
    ttl = ttl_kw(opts);
    return shm_store(self, STRATA_OP_CAS, args[0], args[1], ttl, u64_of(args[2], "token"), 0, 0);
}

/* add_polled(key, bytes, ttl): add of an item that is live only while the host's poller
 * vouches for the table (table.h, POLLED ITEMS); ttl in seconds as add's, positional. For
 * Strata::Dependencies' copies of tag versions read from below. */
static VALUE shm_add_polled(VALUE self, VALUE key, VALUE value, VALUE ttl)
{
    return shm_store(self, STRATA_OP_ADD, key, value, ttl_ms_of(ttl), 0, STRATA_ITEM_POLLED, 0);
}

/* polled_until: until when (unix ms) the poller vouches for POLLED items; 0 = never. */
static VALUE shm_polled_until(VALUE self)
{
    return ULL2NUM(strata_polled_until_get(shm_open_handle(self)->t));
}

/* polled_until=(ms): the poller's vouch (any Integer >= 0). */
static VALUE shm_set_polled_until(VALUE self, VALUE ms)
{
    strata_polled_until_put(shm_open_handle(self)->t, u64_of(ms, "polled_until"));
    return ms;
}

/* version_key_prefix=(prefix): the bytes before a tag id's 16 hex digits in the keys this
 * table's stamp checks read versions under (Strata::Dependencies' reserved keys). Until it is
 * given, no check settles anything (the caller checks through Dependencies). 1 to
 * STRATA_TAG_PREFIX_MAX bytes; this process's handle only. */
static VALUE shm_set_version_key_prefix(VALUE self, VALUE prefix)
{
    shm *s;

    if (!RB_TYPE_P(prefix, T_STRING))
        rb_raise(rb_eTypeError, "version_key_prefix must be a String, not %s", rb_obj_classname(prefix));
    s = shm_open_handle(self);
    if (strata_tag_keys_set(&s->tag_format, RSTRING_PTR(prefix), (size_t)RSTRING_LEN(prefix)) != 0)
        rb_raise(rb_eArgError, "version_key_prefix must be 1 to %d bytes, got %ld", STRATA_TAG_PREFIX_MAX,
                 RSTRING_LEN(prefix));
    RB_GC_GUARD(prefix);
    memset(&s->tag_keys, 0, sizeof s->tag_keys); /* the hashes were of the old keys */
    return prefix;
}

/* delete(key): true if a live entry was removed. When the shard lock can't be taken the table
 * fences the key (it reads as a miss) and answers as if it had removed it; see strata_write. */
static VALUE shm_delete(VALUE self, VALUE key)
{
    shm *s = shm_open_handle(self);
    strata_write_req req = {0};
    strata_status st;

    strata_check_key(key);
    req.op = STRATA_OP_DELETE;
    req.key = RSTRING_PTR(key);
    req.key_len = (size_t)RSTRING_LEN(key);
    st = shm_write(s, &req);
    if (st == STRATA_OK)
        count_l1(s, RSTRING_PTR(key), STRATA_TC_DELETES);
    else if (st != STRATA_NOT_FOUND)
        count_l1_write(s, RSTRING_PTR(key), st);
    RB_GC_GUARD(key);
    if (st == STRATA_OK) return Qtrue;
    if (st == STRATA_NOT_FOUND) return Qfalse;
    raise_write_error(s, st, &req);
    return Qnil;
}

/* lock_fill(key, ttl): the host's fill lock of key (fill_locks.h) for ttl seconds (> 0): an
 * Integer token for unlock_fill when this caller took it, false when another caller holds it,
 * nil when there is no lock to be had (the key's lock word is another key's). The token is the
 * lock word's expiry: the word's tag is the key's, so it need not travel. */
static VALUE shm_lock_fill(VALUE self, VALUE key, VALUE ttl)
{
    shm *s = shm_open_handle(self);
    uint64_t token = 0, ttl_ms;

    strata_check_key(key);
    ttl_ms = ttl_ms_of(ttl);
    switch (strata_fill_lock(s->t, RSTRING_PTR(key), (size_t)RSTRING_LEN(key), ttl_ms, &token)) {
    case STRATA_FILL_LOCK_TAKEN:
        return ULL2NUM(token);
    case STRATA_FILL_LOCK_HELD:
        return Qfalse;
    default:
        return Qnil;
    }
}

/* unlock_fill(key, token): gives back the fill lock lock_fill took as token. True when it was
 * still this caller's, false when it had lapsed meanwhile. */
static VALUE shm_unlock_fill(VALUE self, VALUE key, VALUE token)
{
    shm *s = shm_open_handle(self);
    uint64_t expires;

    strata_check_key(key);
    expires = u64_of(token, "token");
    if (expires == 0 || expires > STRATA_FILL_LOCK_EXPIRES_MASK) rb_raise(rb_eArgError, "not a fill lock token");
    return strata_fill_unlock(s->t, RSTRING_PTR(key), (size_t)RSTRING_LEN(key), expires) ? Qtrue : Qfalse;
}

static VALUE shm_counter(int argc, VALUE *argv, VALUE self, strata_op op)
{
    shm *s;
    VALUE key, amount, opts, kw[2];
    ID ids[2];
    strata_write_req req = {0};
    strata_status st;

    rb_scan_args(argc, argv, "11:", &key, &amount, &opts);
    strata_check_key(key);
    req.op = op;
    req.key = RSTRING_PTR(key);
    req.key_len = (size_t)RSTRING_LEN(key);
    req.amount = NIL_P(amount) ? 1 : u64_of(amount, "amount");
    if (!NIL_P(opts)) {
        ids[0] = rb_intern("ttl");
        ids[1] = rb_intern("initial");
        rb_get_kwargs(opts, ids, 0, 2, kw);
        req.ttl_ms = ttl_ms_of(kw[0]);
        if (kw[1] != Qundef && !NIL_P(kw[1])) {
            req.has_initial = 1;
            req.initial = u64_of(kw[1], "initial");
        }
    }
    s = shm_open_handle(self); /* after every argument conversion, which may run Ruby code */
    st = shm_write(s, &req);
    count_l1_write(s, RSTRING_PTR(key), st);
    RB_GC_GUARD(key);
    switch (st) {
    case STRATA_OK:
        return ULL2NUM(req.result);
    case STRATA_NOT_FOUND:
        return Qnil;
    case STRATA_NOT_NUMBER:
        rb_raise(rb_eArgError, "value of key %" PRIsVALUE " is not an unsigned decimal number", rb_inspect(key));
    default:
        raise_write_error(s, st, &req);
        return Qnil;
    }
}

/* incr(key, amount = 1, ttl: nil, initial: nil) */
static VALUE shm_incr(int argc, VALUE *argv, VALUE self) { return shm_counter(argc, argv, self, STRATA_OP_INCR); }

/* decr(key, amount = 1, ttl: nil, initial: nil) */
static VALUE shm_decr(int argc, VALUE *argv, VALUE self) { return shm_counter(argc, argv, self, STRATA_OP_DECR); }

/* ------------------------------------------------------------------------------------------ */
/* Reads                                                                                      */
/* ------------------------------------------------------------------------------------------ */

typedef struct read_sink {
    shm *s;
    const char *key; /* the key's bytes: a Ruby String's (pinned: on the caller's stack), or a C buffer */
    size_t key_len;
    VALUE str;       /* the copy, once reserved */
    VALUE held;      /* the memo's String when the last reserve answered STRATA_SINK_HAVE */
    uint64_t version; /* of the item last offered */
} read_sink;

/* strata_sink.reserve: a large value the memo already holds at this version is not copied;
 * anything else goes straight into a new binary Ruby string. */
static void *sink_reserve(void *ctx, size_t len, uint64_t version)
{
    read_sink *r = ctx;
    r->held = Qnil;
    r->version = version;
    if (value_memo_wants(&r->s->memo, len)) {
        r->held = value_memo_find(&r->s->memo, r->key, r->key_len, len, version);
        if (!NIL_P(r->held)) return STRATA_SINK_HAVE;
    }
    if (NIL_P(r->str))
        r->str = rb_str_new(NULL, (long)len);
    else
        rb_str_resize(r->str, (long)len);
    return RSTRING_PTR(r->str);
}

/* The value under the key bytes key[0..key_len) (1..STRATA_MAX_KEY, checked by the caller) as a
 * new ASCII-8BIT String, or nil. A large value is a String sharing the memo's frozen buffer: no
 * copy, and still the caller's to change. counted: what of the read goes into the host's
 * counters (a hit or a miss of a cache key): 2 both, 1 a hit only (probe), 0 neither (peek). */
static VALUE shm_read_key(shm *s, const char *key, size_t key_len, uint64_t *cas, int counted)
{
    read_sink r = {s, key, key_len, Qnil, Qnil, 0};
    strata_sink sink = {sink_reserve, &r};
    strata_table *t = s->t;
    const uint32_t *state = s->state;
    strata_status st = strata_get(t, key, key_len, &sink, cas);
    int tries = 0;

    /* Bound: SHM_REOPEN_TRIES more gets (shm_redo). */
    while (word_retired(state)) {
        if (!shm_redo(s, t, &tries, &st)) {
            if (st == STRATA_ERETIRED) st = STRATA_NOT_FOUND; /* the retired table answers nothing */
            break;
        }
        t = s->t;
        state = s->state;
        st = strata_get(t, key, key_len, &sink, cas);
    }
    if (st == STRATA_OK ? counted != 0 : counted > 1) count_l1(s, key, st == STRATA_OK ? STRATA_TC_HITS : STRATA_TC_MISSES);
    if (st == STRATA_ENOMEM) rb_memerror();
    if (st != STRATA_OK) return Qnil;
    /* r.held and r.str are on this frame, so a collection that drops them from the memo
     * (rb_str_dup allocates) leaves them alive. */
    if (!NIL_P(r.held)) return rb_str_dup(r.held);
    if (value_memo_wants(&s->memo, (size_t)RSTRING_LEN(r.str))) {
        value_memo_store(&s->memo, key, key_len, r.str, r.version);
        return rb_str_dup(r.str);
    }
    return r.str;
}

/* shm_read_key for a Ruby String key, checked. */
static VALUE shm_read_counted(shm *s, VALUE key, uint64_t *cas, int counted)
{
    VALUE v;

    strata_check_key(key);
    v = shm_read_key(s, RSTRING_PTR(key), (size_t)RSTRING_LEN(key), cas, counted);
    RB_GC_GUARD(key);
    return v;
}

static VALUE shm_read(shm *s, VALUE key, uint64_t *cas) { return shm_read_counted(s, key, cas, 2); }

/* get(key) */
static VALUE shm_get(VALUE self, VALUE key) { return shm_read(shm_open_handle(self), key, NULL); }

/* peek(key): get, uncounted (Tier#peek) */
static VALUE shm_peek(VALUE self, VALUE key) { return shm_read_counted(shm_open_handle(self), key, NULL, 0); }

/* probe(key): get counting a hit only (Tier#probe: a miss is read again, and counted then) */
static VALUE shm_probe(VALUE self, VALUE key) { return shm_read_counted(shm_open_handle(self), key, NULL, 1); }

/* get_with_cas(key): [bytes, token] or nil */
static VALUE shm_get_with_cas(VALUE self, VALUE key)
{
    uint64_t cas = 0;
    VALUE v = shm_read(shm_open_handle(self), key, &cas);
    return NIL_P(v) ? Qnil : rb_assoc_new(v, ULL2NUM(cas));
}

/* get_multi(keys): {key => bytes} for the keys found */
static VALUE shm_get_multi(VALUE self, VALUE keys)
{
    VALUE found = rb_hash_new();
    long n;

    /* to_ary is the caller's code and may close the table: take the handle after it. */
    keys = rb_convert_type(keys, T_ARRAY, "Array", "to_ary");
    shm_open_handle(self);
    n = RARRAY_LEN(keys);
    /* Bound: at most n lookups. Storing a found key may run a String subclass's eql?, which
     * may close the table (itself, or by letting another thread run) or change keys: so the
     * handle is taken again for every key and keys' length is read again before each entry. */
    for (long i = 0; i < n && i < RARRAY_LEN(keys); i++) {
        VALUE key = RARRAY_AREF(keys, i);
        VALUE v = shm_read(shm_open_handle(self), key, NULL);
        if (!NIL_P(v)) rb_hash_aset(found, key, v);
    }
    return found;
}

/* strata_entry_stamps_check on s's table; UNKNOWN when a rebuild retired it meanwhile (the
 * versions it read may be older than the new table's). */
static strata_stamps stamps_check(shm *s, const char *bytes, size_t len)
{
    const uint32_t *state = s->state;
    strata_stamps answer = strata_entry_stamps_check(s->t, bytes, len, &s->tag_format, &s->tag_keys);
    return word_retired(state) ? STRATA_STAMPS_UNKNOWN : answer;
}

/* check_stamps(bytes): true when every dependency stamp of the entry bytes equals the tag
 * version this table holds, false when one differs, nil when some could not be settled here
 * (stamp_check.h). No Ruby object is made and no Ruby code runs. */
static VALUE shm_check_stamps(VALUE self, VALUE bytes)
{
    shm *s;
    strata_stamps answer;

    if (!RB_TYPE_P(bytes, T_STRING))
        rb_raise(rb_eTypeError, "value must be a String, not %s", rb_obj_classname(bytes));
    s = shm_open_handle(self);
    answer = stamps_check(s, RSTRING_PTR(bytes), (size_t)RSTRING_LEN(bytes));
    RB_GC_GUARD(bytes);
    if (answer == STRATA_STAMPS_CURRENT) return Qtrue;
    return answer == STRATA_STAMPS_STALE ? Qfalse : Qnil;
}

/* get_current(key): get for the stack's probe of this table (Strata::Tier#get_current), with
 * a stamped entry's stamps checked against this table's tag versions in the same call: its
 * bytes when every one is current, false when one is stale or could not be settled here
 * (stamp_check.h; the caller then reads and checks it through Dependencies). Bytes that are
 * not a stamped entry, and nil, as get gives them. Counted as probe counts: the bytes it
 * returns are a hit; nil and false count nothing (the caller reads the key again). */
static VALUE shm_get_current(VALUE self, VALUE key)
{
    VALUE v = shm_read_counted(shm_open_handle(self), key, NULL, 0);
    strata_stamps answer = STRATA_STAMPS_CURRENT;
    shm *s;

    if (NIL_P(v)) return v;
    /* The read may have allocated, and so collected: the handle is taken again. */
    s = shm_open_handle(self);
    if (strata_entry_stamped(RSTRING_PTR(v), (size_t)RSTRING_LEN(v)))
        answer = stamps_check(s, RSTRING_PTR(v), (size_t)RSTRING_LEN(v));
    RB_GC_GUARD(v);
    if (answer != STRATA_STAMPS_CURRENT) return Qfalse;
    count_l1(s, RSTRING_PTR(key), STRATA_TC_HITS);
    RB_GC_GUARD(key);
    return v;
}

/* The encoding index of a plain entry's kind (strata_entry_plain). */
static int plain_encindex(int kind)
{
    if (kind == STRATA_ENTRY_UTF8) return rb_utf8_encindex();
    if (kind == STRATA_ENTRY_ASCII) return rb_usascii_encindex();
    return rb_ascii8bit_encindex();
}

/* What get_plain_named answers for v, the bytes just read under the key bytes key: PLAIN_VALUE
 * with *value the value String, when v is an entry strata_entry_plain takes, its stamps current
 * (its encoding set, a String sharing v's buffer); PLAIN_HELD for any other entry, but a stamped
 * one whose stamps are not all current here, which is PLAIN_MISS, as a key not held is. The
 * first two are counted, as hits. v is the caller's own copy (or a String sharing the memo's
 * frozen buffer): read, never trusted from the table twice. */
enum { PLAIN_MISS, PLAIN_HELD, PLAIN_VALUE };

static int plain_answer(VALUE self, VALUE v, const char *key, VALUE *value)
{
    /* The read may have allocated, and so collected: the handle is taken again. */
    shm *s = shm_open_handle(self);
    size_t at = 0;
    int stamped = 0, kind = strata_entry_plain(RSTRING_PTR(v), (size_t)RSTRING_LEN(v), &at, &stamped);

    if (kind ? stamped : strata_entry_stamped(RSTRING_PTR(v), (size_t)RSTRING_LEN(v))) {
        if (stamps_check(s, RSTRING_PTR(v), (size_t)RSTRING_LEN(v)) !=
            STRATA_STAMPS_CURRENT)
            return PLAIN_MISS;
    }
    count_l1(s, key, STRATA_TC_HITS);
    if (!kind) return PLAIN_HELD;
    *value = rb_str_subseq(v, (long)at, RSTRING_LEN(v) - (long)at);
    rb_enc_associate_index(*value, plain_encindex(kind));
    RB_GC_GUARD(v);
    return PLAIN_VALUE;
}

/* get_current_plain(key): get_current for a reader that takes an entry holding a bare String as
 * its value (Strata::Tier#get_current_plain, Stack#get_host_plain): that value, a String of its
 * encoding, when the entry under key is one strata_entry_plain takes, its stamps current
 * (plain_answer); [bytes] for any other bytes held, a stamped entry's stamps current; false for a
 * stamped entry whose stamps are not all current here; nil when key is not held. Counted as
 * get_current counts: what it returns but false and nil, as a hit (the caller reads key again). */
static VALUE shm_get_current_plain(VALUE self, VALUE key)
{
    VALUE v = shm_read_counted(shm_open_handle(self), key, NULL, 0), value = Qnil;

    if (NIL_P(v)) return v;
    switch (plain_answer(self, v, RSTRING_PTR(key), &value)) {
    case PLAIN_VALUE:
        return value;
    case PLAIN_HELD:
        return rb_ary_new_from_values(1, &v);
    default:
        return Qfalse;
    }
}

/* get_plain_named(names, prefix, max_key_bytes): [values, held, rest], get_multi for a reader
 * that names its keys (Strata::Tier#get_plain_named, Stack#get_multi_plain): each name's key is
 * prefix's bytes then the name's, as StrataStore namespaces a String name. values {name =>
 * value String} for each entry strata_entry_plain takes, stamps checked current in the same call
 * (plain_answer); held {name => bytes} for the other entries found, but a stamped one not
 * current; rest, an Array of the names in neither: not held, stamped and not current, or not a
 * name this call makes a key of (not a plain non-empty String, or prefix and name longer than
 * max_key_bytes, which the caller shortens its own way). Only values and held count, as hits:
 * the caller reads the rest again (Stack#get_multi), which counts them then. Each key is made in
 * a buffer on this frame: no Ruby String per key, and values is the caller's answer as it is. */
static VALUE shm_get_plain_named(VALUE self, VALUE names, VALUE prefix, VALUE max_key_bytes)
{
    char key[STRATA_MAX_KEY];
    VALUE values = rb_hash_new(), held = rb_hash_new(), rest = rb_ary_new();
    long n, prefix_len, max = NUM2LONG(max_key_bytes);

    names = rb_convert_type(names, T_ARRAY, "Array", "to_ary");
    StringValue(prefix);
    if (max > STRATA_MAX_KEY) max = STRATA_MAX_KEY;
    prefix_len = RSTRING_LEN(prefix);
    if (prefix_len >= max) return rb_ary_new_from_args(3, values, held, rb_ary_dup(names));
    memcpy(key, RSTRING_PTR(prefix), (size_t)prefix_len);
    RB_GC_GUARD(prefix);
    shm_open_handle(self);
    n = RARRAY_LEN(names);
    /* Bound: at most n lookups, each with at most 65535 stamps checked. Only plain Strings are
     * made keys and hashed, so no Ruby code runs in the loop; names' length is read again before
     * each one all the same, and the handle taken again for every read (an allocation may
     * collect). */
    for (long i = 0; i < n && i < RARRAY_LEN(names); i++) {
        VALUE name = RARRAY_AREF(names, i), v, value = Qnil;
        long len;

        if (!RB_TYPE_P(name, T_STRING) || rb_obj_class(name) != rb_cString || (len = RSTRING_LEN(name)) == 0 ||
            len > max - prefix_len) {
            rb_ary_push(rest, name);
            continue;
        }
        memcpy(key + prefix_len, RSTRING_PTR(name), (size_t)len);
        v = shm_read_key(shm_open_handle(self), key, (size_t)(prefix_len + len), NULL, 0);
        switch (NIL_P(v) ? PLAIN_MISS : plain_answer(self, v, key, &value)) {
        case PLAIN_VALUE:
            rb_hash_aset(values, name, value);
            break;
        case PLAIN_HELD:
            rb_hash_aset(held, name, v);
            break;
        default:
            rb_ary_push(rest, name);
        }
        RB_GC_GUARD(name); /* names may have lost it meanwhile */
    }
    return rb_ary_new_from_args(3, values, held, rest);
}

static void keys_each(void *ctx, const void *key, size_t len)
{
    rb_ary_push((VALUE)ctx, rb_str_new(key, (long)len));
}

/* keys: every live key, from a lock-free scan */
static VALUE shm_keys(VALUE self)
{
    shm *s = shm_open_handle(self);
    VALUE out = rb_ary_new();
    strata_keys(s->t, keys_each, (void *)out);
    return out;
}

/* ------------------------------------------------------------------------------------------ */
/* Maintenance                                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef struct maint_call {
    strata_table *t;
    uint64_t removed;
    strata_status st;
} maint_call;

static void *cleanup_blocking(void *p)
{
    maint_call *m = p;
    m->st = strata_cleanup(m->t, &m->removed);
    return NULL;
}

static void *clear_blocking(void *p)
{
    maint_call *m = p;
    m->st = strata_clear(m->t);
    return NULL;
}

/* cleanup: number of expired entries removed (shards whose lock timed out are skipped) */
static VALUE shm_cleanup(VALUE self)
{
    shm *s = shm_open_handle(self);
    maint_call m = {s->t, 0, STRATA_OK};
    run_without_gvl(s, cleanup_blocking, &m);
    return ULL2NUM(m.removed);
}

/* clear: true. strata_clear fences a shard it can't lock (it reads as empty) and so returns
 * STRATA_OK; anything else would be a new failure of the table: a TierError. */
static VALUE shm_clear(VALUE self)
{
    shm *s = shm_open_handle(self);
    maint_call m = {s->t, 0, STRATA_OK};
    run_without_gvl(s, clear_blocking, &m);
    value_memo_clear(&s->memo);
    if (m.st == STRATA_OK) return Qtrue;
    rb_raise(strata_error_class("Strata::TierError"), "clear: %s", strata_strerror(m.st));
    return Qnil;
}

typedef struct stats_call {
    strata_table *t;
    strata_stats st;
} stats_call;

static void *stats_blocking(void *p)
{
    stats_call *c = p;
    strata_stats_get(c->t, &c->st);
    return NULL;
}

static void hash_put(VALUE h, const char *name, uint64_t v) { rb_hash_aset(h, ID2SYM(rb_intern(name)), ULL2NUM(v)); }

/* stats: this process's counters plus geometry and live entries (an O(slots) scan, run
 * without the GVL) */
static VALUE shm_stats(VALUE self)
{
    shm *s = shm_open_handle(self);
    stats_call c;
    strata_stats st;
    VALUE h = rb_hash_new();

    memset(&c, 0, sizeof c);
    c.t = s->t;
    run_without_gvl(s, stats_blocking, &c);
    st = c.st;
    hash_put(h, "hits", st.counters.hits);
    hash_put(h, "misses", st.counters.misses);
    hash_put(h, "sets", st.counters.sets);
    hash_put(h, "deletes", st.counters.deletes);
    hash_put(h, "evictions", st.counters.evictions);
    hash_put(h, "expired", st.counters.expired);
    hash_put(h, "lock_timeouts", st.counters.lock_timeouts);
    hash_put(h, "too_large", st.counters.too_large);
    hash_put(h, "owner_died_recoveries", st.counters.owner_died_recoveries);
    hash_put(h, "torn_reads", st.counters.torn_reads);
    hash_put(h, "fill_lock_collisions", st.counters.fill_lock_collisions);
    hash_put(h, "size", st.geometry.size);
    hash_put(h, "shards", st.geometry.shards);
    hash_put(h, "segment_size", st.geometry.segment_size);
    hash_put(h, "segments_per_shard", st.geometry.segments_per_shard);
    hash_put(h, "slots", st.geometry.slots);
    hash_put(h, "max_value_size", st.geometry.max_value_size);
    hash_put(h, "entries", st.entries);
    hash_put(h, "data_bytes", st.geometry.data_bytes);
    hash_put(h, "memo_entries", s->memo.entries);
    hash_put(h, "memo_bytes", s->memo.bytes);
    hash_put(h, "memo_old_dropped_bytes", s->memo.old_dropped);
    hash_put(h, "reopens", s->reopens);
    return h;
}

/* segment_starts: {now_ms:, shards: [[start_ms or nil, ...], ...]}, per shard the start (unix
 * ms; nil = unknown) of each segment in use, and the time they were validated against
 * (strata_segments_get). O(shards * segments_per_shard) loads, with the GVL: no lock is taken
 * and nothing waits. */
static VALUE shm_segment_starts(VALUE self)
{
    strata_table *t = shm_open_handle(self)->t;
    const strata_geometry *g = strata_geometry_of(t);
    VALUE buf;
    strata_segment *segs = ALLOCV_N(strata_segment, buf, g->segments_per_shard);
    VALUE shards = rb_ary_new_capa(g->shards), h = rb_hash_new();
    uint64_t now = 0;

    for (uint32_t s = 0; s < g->shards; s++) {
        VALUE starts = rb_ary_new();
        uint64_t at = strata_segments_get(t, s, segs);
        if (at > now) now = at;
        for (uint32_t i = 0; i < g->segments_per_shard; i++)
            if (segs[i].fill) rb_ary_push(starts, segs[i].started_ms ? ULL2NUM(segs[i].started_ms) : Qnil);
        rb_ary_push(shards, starts);
    }
    ALLOCV_END(buf);
    hash_put(h, "now_ms", now);
    rb_hash_aset(h, ID2SYM(rb_intern("shards")), shards);
    return h;
}

static VALUE shm_max_value_size(VALUE self)
{
    return ULL2NUM(strata_geometry_of(shm_open_handle(self)->t)->max_value_size);
}

static VALUE shm_size(VALUE self) { return ULL2NUM(strata_geometry_of(shm_open_handle(self)->t)->size); }

/* close: idempotent */
static VALUE shm_close(VALUE self)
{
    shm *s;
    TypedData_Get_Struct(self, shm, &shm_type, s);
    if (s->closed) return Qnil;
    s->closed = 1;
    value_memo_free(&s->memo);
    if (s->users == 0) {
        shm_close_old(s);
        if (s->t) strata_close(s->t);
        s->t = NULL;
    }
    return Qnil;
}

static VALUE shm_closed_p(VALUE self)
{
    shm *s;
    TypedData_Get_Struct(self, shm, &shm_type, s);
    return s->closed ? Qtrue : Qfalse;
}

/* ------------------------------------------------------------------------------------------ */
/* Open and test hooks                                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef struct open_call {
    const char *path;
    strata_options opts;
    strata_table *t;
    const char *reason;
    int err;
    strata_status st;
} open_call;

static void *open_blocking(void *p)
{
    open_call *o = p;
    o->st = strata_open(o->path, &o->opts, &o->t, &o->reason, &o->err);
    return NULL;
}

/* _open(path, size, shards, segment_size, slots, lock_timeout): the rebuild reason or nil.
 * 0 means default for shards, segment_size and slots. */
static VALUE shm_open(VALUE self, VALUE path, VALUE size, VALUE shards, VALUE segment_size, VALUE slots,
                      VALUE lock_timeout)
{
    shm *s;
    open_call o;
    strata_geometry g;
    const char *what = NULL;
    strata_status st;
    double timeout = NUM2DBL(lock_timeout);

    TypedData_Get_Struct(self, shm, &shm_type, s);
    if (s->t) rb_raise(strata_error_class("Strata::Error"), "already open");
    FilePathValue(path);
    memset(&o, 0, sizeof o);
    o.path = StringValueCStr(path);
    o.opts.size = NUM2ULL(size);
    o.opts.shards = NUM2UINT(shards);
    o.opts.segment_size = NUM2UINT(segment_size);
    o.opts.slots = NUM2ULL(slots);
    o.opts.lock_timeout_ns = (uint64_t)(timeout * 1e9);
    st = strata_geometry_resolve(&o.opts, &g, &what);
    if (st != STRATA_OK) rb_raise(rb_eArgError, "%s", what);

    run_without_gvl(NULL, open_blocking, &o);
    RB_GC_GUARD(path);
    switch (o.st) {
    case STRATA_OK:
        shm_attach(s, o.t);
        s->path = strdup(o.path); /* NULL (no memory): a retired table then can't be reopened */
        s->opts = o.opts;
        s->opts.adopt = 1;
        return o.reason ? rb_str_new_cstr(o.reason) : Qnil;
    case STRATA_EUNSAFE:
    case STRATA_EUNSAFE_DIR:
        rb_raise(strata_error_class("Strata::UnsafeFileError"), "%s: %s", o.path, strata_strerror(o.st));
    case STRATA_EIO:
        rb_raise(strata_error_class("Strata::TierError"), "%s: %s (%s)", o.path, strata_strerror(o.st),
                 strerror(o.err));
    default:
        rb_raise(strata_error_class("Strata::TierError"), "%s: %s", o.path, strata_strerror(o.st));
    }
    return Qnil;
}

/* _memo_size=(bytes): the value memo's budget (value_memo.h); empties it; 0 turns it off. */
static VALUE shm_set_memo_size(VALUE self, VALUE bytes)
{
    shm *s = shm_open_handle(self);
    value_memo_set_limit(&s->memo, (size_t)u64_of(bytes, "memo_size"));
    return bytes;
}

static uint32_t shard_arg(shm *s, VALUE shard)
{
    long n = NUM2LONG(shard);
    if (n < 0 || (uint64_t)n >= strata_geometry_of(s->t)->shards) rb_raise(rb_eArgError, "no shard %ld", n);
    return (uint32_t)n;
}

/* TEST ONLY. The shard key hashes to. */
static VALUE shm_shard_for(VALUE self, VALUE key)
{
    shm *s = shm_open_handle(self);
    strata_check_key(key);
    return UINT2NUM(strata_shard_for(s->t, RSTRING_PTR(key), (size_t)RSTRING_LEN(key)));
}

typedef struct hold_call {
    strata_table *t;
    uint32_t shard;
    strata_status st;
} hold_call;

static void *hold_blocking(void *p)
{
    hold_call *h = p;
    h->st = strata_lock_shard(h->t, h->shard, 1);
    return NULL;
}

/* TEST ONLY. Take a shard's lock and return holding it (true), or false on timeout. */
static VALUE shm_hold_shard_lock(VALUE self, VALUE shard)
{
    shm *s = shm_open_handle(self);
    hold_call h = {s->t, shard_arg(s, shard), STRATA_OK};
    run_without_gvl(s, hold_blocking, &h);
    if (h.st == STRATA_OK) return Qtrue;
    if (h.st == STRATA_LOCK_TIMEOUT) return Qfalse;
    rb_raise(strata_error_class("Strata::TierError"), "%s", strata_strerror(h.st));
    return Qnil;
}

/* TEST ONLY. Release a lock taken by _hold_shard_lock on this thread. */
static VALUE shm_release_shard_lock(VALUE self, VALUE shard)
{
    shm *s = shm_open_handle(self);
    if (strata_unlock_shard(s->t, shard_arg(s, shard)) != STRATA_OK)
        rb_raise(strata_error_class("Strata::Error"), "shard %ld is not held by this thread", NUM2LONG(shard));
    return Qtrue;
}

void strata_init_shared_memory(void)
{
    VALUE mStrata = rb_define_module("Strata");
    VALUE mTiers = rb_define_module_under(mStrata, "Tiers");
    VALUE c = rb_define_class_under(mTiers, "SharedMemory", rb_cObject);

    rb_define_alloc_func(c, shm_alloc);
    rb_define_private_method(c, "_open", shm_open, 6);
    rb_define_method(c, "get", shm_get, 1);
    rb_define_method(c, "peek", shm_peek, 1);
    rb_define_method(c, "probe", shm_probe, 1);
    rb_define_method(c, "get_multi", shm_get_multi, 1);
    rb_define_method(c, "get_with_cas", shm_get_with_cas, 1);
    rb_define_method(c, "set", shm_set, -1);
    rb_define_method(c, "add", shm_add, -1);
    rb_define_method(c, "add_for_fill", shm_add_for_fill, -1);
    rb_define_method(c, "cas", shm_cas, -1);
    rb_define_method(c, "delete", shm_delete, 1);
    rb_define_method(c, "lock_fill", shm_lock_fill, 2);
    rb_define_method(c, "unlock_fill", shm_unlock_fill, 2);
    rb_define_method(c, "add_polled", shm_add_polled, 3);
    rb_define_method(c, "polled_until", shm_polled_until, 0);
    rb_define_method(c, "polled_until=", shm_set_polled_until, 1);
    rb_define_method(c, "incr", shm_incr, -1);
    rb_define_method(c, "decr", shm_decr, -1);
    rb_define_method(c, "check_stamps", shm_check_stamps, 1);
    rb_define_method(c, "version_key_prefix=", shm_set_version_key_prefix, 1);
    rb_define_method(c, "get_current", shm_get_current, 1);
    rb_define_method(c, "get_plain_named", shm_get_plain_named, 3);
    rb_define_method(c, "get_current_plain", shm_get_current_plain, 1);
    rb_define_method(c, "keys", shm_keys, 0);
    rb_define_method(c, "cleanup", shm_cleanup, 0);
    rb_define_method(c, "clear", shm_clear, 0);
    rb_define_method(c, "stats", shm_stats, 0);
    rb_define_method(c, "segment_starts", shm_segment_starts, 0);
    strata_init_counters(c);
    rb_define_method(c, "max_value_size", shm_max_value_size, 0);
    rb_define_method(c, "size", shm_size, 0);
    rb_define_method(c, "close", shm_close, 0);
    rb_define_method(c, "closed?", shm_closed_p, 0);
    rb_define_method(c, "_memo_size=", shm_set_memo_size, 1);
    rb_define_method(c, "_shard_for", shm_shard_for, 1);
    rb_define_method(c, "_hold_shard_lock", shm_hold_shard_lock, 1);
    rb_define_method(c, "_release_shard_lock", shm_release_shard_lock, 1);
}
