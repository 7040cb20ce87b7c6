/* wire.c - Strata::Meta::Wire; see wire.h for its state and invariants. */
#include "wire.h"
#include "byte_buffer.h"
#include "ext_common.h"

/* Ruby's headers are not -Wextra clean; relax warnings for them only. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <ruby.h>
#include <ruby/fiber/scheduler.h>
#include <ruby/io.h>
#include <ruby/thread.h>
#pragma GCC diagnostic pop

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/time.h>
#include <time.h>

enum {
    /* Room asked of the read buffer before each recv. */
    READ_CHUNK = 64 * 1024,
    /* Short strings are gathered in `out` up to this many bytes before a send. */
    WRITE_BUFFER = 64 * 1024,
    /* A string this long or longer (a value) is never copied: it leaves from its own bytes. */
    STRAIGHT = 2048,
    /* Pieces one send gathers (an iovec each): runs of `out` and uncopied strings. */
    MAX_PARTS = 16,
    /* A reply line longer than this means the stream is not memcached's. */
    MAX_LINE = 64 * 1024,
    /* Buffers grown past this (a big value) are given back to it between requests. */
    KEEP = 256 * 1024,
    /* Most a data block is reserved for before its bytes arrive; past it the buffer grows as
     * they come, so a lying length costs no more than what was actually sent. */
    RESERVE_AHEAD = 1024 * 1024,
};

/* SO_RCVTIMEO of the socket: the longest one blocking recv waits. A blocking recv runs only while
 * at least BLOCK_MARGIN seconds are left before the deadline, which covers the slice and the
 * kernel's rounding of it up to whole timer ticks (a few ms at HZ 100..1000), so the deadline is
 * kept; closer to it, waits go through rb_io_wait with the exact time left. */
#define BLOCK_SLICE 0.02
#define BLOCK_MARGIN 0.05

/* memcached's largest item (its -I limit tops out at 1 GiB): a longer data block is not memcached's. */
#define MAX_DATA_BLOCK (1024L * 1024 * 1024)

/* A piece of what write queued: the next `len` bytes of `out`, or (straight) bytes
 * [off, off + len) of the frozen string `str`, sent from its own memory. */
typedef struct part {
    VALUE str;
    size_t off, len;
    int straight;
} part;

typedef struct wire {
    VALUE io;
    int fd;
    /* The socket is in blocking mode with SO_RCVTIMEO = BLOCK_SLICE (see wire_fill). */
    int can_block;
    /* While a recv without the GVL writes into `in`: the fork generation it started in, plus 1
     * (0: none). Every other caller must keep its hands off `in`; a forked child, where the
     * receiving thread does not exist, sees a stale generation and may go on. */
    unsigned long receiving;
    double deadline;
    strata_bytes in, out;
    /* What write queued and no send took yet, in order; out holds the bytes of the others. */
    part parts[MAX_PARTS];
    int nparts;
} wire;

static void wire_mark(void *p)
{
    wire *w = p;
    rb_gc_mark(w->io);
    for (int i = 0; i < w->nparts; i++) {
        if (w->parts[i].straight) rb_gc_mark(w->parts[i].str);
    }
}

static void wire_free(void *p)
{
    wire *w = p;
    strata_bytes_free(&w->in);
    strata_bytes_free(&w->out);
    xfree(w);
}

static size_t wire_memsize(const void *p)
{
    const wire *w = p;
    return sizeof(*w) + w->in.cap + w->out.cap;
}

static const rb_data_type_t wire_type = {
    .wrap_struct_name = "Strata::Meta::Wire",
    .function = {.dmark = wire_mark, .dfree = wire_free, .dsize = wire_memsize},
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static VALUE wire_alloc(VALUE klass)
{
    wire *w;
    VALUE self = TypedData_Make_Struct(klass, wire, &wire_type, w);
    w->io = Qnil;
    w->fd = -1;
    return self;
}

static wire *wire_get(VALUE self)
{
    wire *w;
    TypedData_Get_Struct(self, wire, &wire_type, w);
    return w;
}

/* Raises Strata::Meta::Wire::<name> (defined in wire.rb). Looked up only when raising. */
NORETURN(static void wire_raise(const char *name, const char *fmt, ...));
static void wire_raise(const char *name, const char *fmt, ...)
{
    char path[64], message[160];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    snprintf(path, sizeof path, "Strata::Meta::Wire::%s", name);
    rb_raise(strata_error_class(path), "%s", message);
}

static double monotonic_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Forks this process descends from; bumped in the child by pthread_atfork. */
static unsigned long fork_generation;

static void count_fork(void)
{
    fork_generation++;
}

static int wire_receiving(const wire *w)
{
    return w->receiving != 0 && w->receiving == fork_generation + 1;
}

/* Raises Wire::Idle while another caller's recv writes into `in`. Called on entry and again
 * before `in` is touched after anything that may have let another thread run. */
static void wire_check_alone(const wire *w)
{
    if (wire_receiving(w)) wire_raise("Idle", "wire used by two callers at once");
}

/* The wire of self, as long as no recv of another caller is writing into its buffer. */
static wire *wire_unused(VALUE self)
{
    wire *w = wire_get(self);
    wire_check_alone(w);
    return w;
}

/* The wire of self, attached and inside a request. */
static wire *wire_active(VALUE self)
{
    wire *w = wire_unused(self);
    if (NIL_P(w->io) || w->deadline == 0) wire_raise("Idle", "I/O outside a request");
    return w;
}

/* Makes room for `room` more bytes in b; a buffer that can't grow is a failed stream (the
 * connection is dropped), not a NoMemoryError in the app's request. */
static void wire_reserve(strata_bytes *b, size_t room)
{
    if (strata_bytes_reserve(b, room) != 0) wire_raise("StreamError", "could not buffer %zu more bytes", room);
}

/* Waits until one of events is ready or the deadline passes (Wire::TimedOut). Returns the events
 * ready, or all of events when Ruby does not say which. */
static int wire_wait(wire *w, int events)
{
    if (NIL_P(w->io)) wire_raise("Idle", "I/O on a detached wire");
    double left = w->deadline - monotonic_now();
    if (left <= 0) wire_raise("TimedOut", "timed out");
    VALUE ready = rb_io_wait(w->io, INT2FIX(events), DBL2NUM(left));
    if (!RTEST(ready)) wire_raise("TimedOut", "timed out");
    return FIXNUM_P(ready) ? FIX2INT(ready) : events;
}

/* Receives whatever is ready into `in`, without waiting: 1 when bytes came, 0 when none were
 * ready. EOF is Wire::Closed. */
static int wire_recv_ready(wire *w)
{
    wire_check_alone(w); /* a wait came before: another thread may have started a recv */
    wire_reserve(&w->in, READ_CHUNK);
    for (;;) {
        ssize_t n = recv(w->fd, w->in.data + w->in.end, w->in.cap - w->in.end, MSG_DONTWAIT);
        if (n > 0) {
            w->in.end += (size_t)n;
            return 1;
        }
        if (n == 0) wire_raise("Closed", "closed the connection");
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        rb_syserr_fail(errno, "recv");
    }
}

struct blocking_recv {
    int fd;
    char *into;
    size_t room;
    ssize_t n;
    int error;
};

static void *blocking_recv_without_gvl(void *p)
{
    struct blocking_recv *r = p;
    r->n = recv(r->fd, r->into, r->room, 0);
    r->error = r->n < 0 ? errno : 0;
    return NULL;
}

/* One recv that blocks, without the GVL, for at most BLOCK_SLICE: 1 when bytes came, 0 when the
 * slice passed or an interrupt cut it short (after letting the interrupt in). Thread#raise,
 * Timeout and signals reach the thread through RUBY_UBF_IO, which makes recv return EINTR. */
static int wire_recv_blocking(wire *w)
{
    wire_check_alone(w);
    /* Another thread may have closed the IO since the last slice, and its descriptor number may
     * now be another socket's: rb_io_descriptor raises IOError on a closed IO. */
    if (rb_io_descriptor(w->io) != w->fd) wire_raise("Closed", "socket replaced under the wire");
    wire_reserve(&w->in, READ_CHUNK);
    struct blocking_recv r = {w->fd, w->in.data + w->in.end, w->in.cap - w->in.end, -1, EINTR};
    w->receiving = fork_generation + 1;
    /* The 2 variant raises nothing, so `receiving` is always cleared; interrupts go in below. */
    rb_thread_call_without_gvl2(blocking_recv_without_gvl, &r, RUBY_UBF_IO, NULL);
    w->receiving = 0;
    if (r.n > 0) {
        w->in.end += (size_t)r.n;
        return 1;
    }
    if (r.n == 0) wire_raise("Closed", "closed the connection");
    if (r.error == EINTR) {
        rb_thread_check_ints();
        return 0;
    }
    if (r.error == EAGAIN || r.error == EWOULDBLOCK) {
        /* The slice passed, or someone put the descriptor back in non-blocking mode (the flag
         * belongs to the open file, shared with any process or IO holding it): then every recv
         * would return at once, so waits go back to rb_io_wait. */
        int flags = fcntl(w->fd, F_GETFL);
        if (flags < 0 || (flags & O_NONBLOCK)) w->can_block = 0;
        return 0;
    }
    rb_syserr_fail(r.error, "recv");
}

/* Whether the next wait may be a blocking recv: the socket allows it, no fiber scheduler wants
 * to run other fibers meanwhile, and the slice ends well before the deadline. */
static int wire_may_block(const wire *w)
{
    return w->can_block && w->deadline - monotonic_now() >= BLOCK_MARGIN && NIL_P(rb_fiber_scheduler_current());
}

/* Appends at least one byte to `in`, waiting up to the deadline. A blocking recv waits and reads
 * in one syscall, where rb_io_wait takes a ppoll (and Ruby's bookkeeping around it) and then a
 * recv: that was a sixth of a small get's CPU. It waits before reading: a reply is rarely there
 * the instant its request left, so a recv first would fail on almost every request. */
static void wire_fill(wire *w)
{
    for (;;) {
        if (wire_may_block(w)) {
            if (wire_recv_blocking(w)) return;
            continue;
        }
        wire_wait(w, RUBY_IO_READABLE);
        if (wire_recv_ready(w)) return;
    }
}

/* Drops the first k bytes sent from the queued parts (and from `out`). */
static void wire_sent(wire *w, size_t k)
{
    int done = 0;
    while (done < w->nparts && k > 0) {
        part *p = &w->parts[done];
        size_t m = k < p->len ? k : p->len;
        if (p->straight) p->off += m;
        else strata_bytes_consume(&w->out, m);
        p->len -= m;
        k -= m;
        if (p->len > 0) break;
        done++;
    }
    memmove(w->parts, w->parts + done, (size_t)(w->nparts - done) * sizeof(part));
    w->nparts -= done;
}

/* Sends every queued part, in order, one sendmsg per try. */
static void wire_flush_out(wire *w)
{
    while (w->nparts > 0) {
        /* Built afresh on every try: a wait below gives up the GVL. */
        struct iovec iov[MAX_PARTS];
        size_t gathered = 0;
        for (int i = 0; i < w->nparts; i++) {
            const part *p = &w->parts[i];
            if (p->straight) {
                iov[i].iov_base = RSTRING_PTR(p->str) + p->off;
            } else {
                iov[i].iov_base = strata_bytes_head(&w->out) + gathered;
                gathered += p->len;
            }
            iov[i].iov_len = p->len;
        }
        /* Two callers on one wire (a misuse) could have consumed `out` meanwhile. */
        if (strata_bytes_held(&w->out) < gathered) wire_raise("Idle", "wire used by two callers at once");
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)w->nparts};
        ssize_t k = sendmsg(w->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k >= 0) {
            wire_sent(w, (size_t)k);
            continue;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) rb_syserr_fail(errno, "sendmsg");
        /* Not writable: the server may be waiting for its replies to be read. */
        if (wire_wait(w, RUBY_IO_READABLE | RUBY_IO_WRITABLE) & RUBY_IO_READABLE) wire_recv_ready(w);
    }
}

/* Forgets every queued part (their bytes in `out` are cleared by the caller). */
static void wire_drop_parts(wire *w)
{
    w->nparts = 0;
}

/* Queues str after what is queued: a short one is copied into `out`, a long one stays where
 * it is (a frozen view keeps its bytes if the caller changes the string). */
static void wire_queue(wire *w, VALUE str)
{
    for (;;) {
        size_t n = (size_t)RSTRING_LEN(str);
        if (n == 0) return;
        int straight = n >= STRAIGHT;
        int joins_last = !straight && w->nparts > 0 && !w->parts[w->nparts - 1].straight;
        if ((!joins_last && w->nparts == MAX_PARTS) || (!straight && strata_bytes_held(&w->out) + n > WRITE_BUFFER)) {
            wire_flush_out(w); /* makes room, but may wait: measure str again */
            continue;
        }
        if (straight) {
            w->parts[w->nparts++] = (part){.str = rb_str_new_frozen(str), .off = 0, .len = n, .straight = 1};
            return;
        }
        wire_reserve(&w->out, n);
        memcpy(w->out.data + w->out.end, RSTRING_PTR(str), n);
        w->out.end += n;
        if (joins_last) w->parts[w->nparts - 1].len += n;
        else w->parts[w->nparts++] = (part){.str = Qnil, .off = 0, .len = n, .straight = 0};
        return;
    }
}

/* Puts fd in blocking mode with a receive timeout of BLOCK_SLICE; 1 when both took. Sends and
 * the non-blocking receives pass MSG_DONTWAIT, so they are unaffected. */
static int blocking_with_slice(int fd)
{
    struct timeval slice = {0, (suseconds_t)(BLOCK_SLICE * 1e6)};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof slice) != 0) return 0;
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0;
}

/* attach(io): the stream of a connected socket from now on; buffers start empty. The socket's
 * descriptor is switched to blocking mode with a receive timeout (see wire_fill). */
static VALUE wire_attach(VALUE self, VALUE io)
{
    wire *w = wire_unused(self);
    int fd = rb_io_descriptor(io);
    strata_bytes_clear(&w->in, KEEP);
    strata_bytes_clear(&w->out, KEEP);
    wire_drop_parts(w);
    w->io = io;
    w->fd = fd;
    w->can_block = blocking_with_slice(fd);
    w->deadline = 0;
    return self;
}

/* detach: forgets the socket and every buffered byte. Does not close the socket. */
static VALUE wire_detach(VALUE self)
{
    wire *w = wire_unused(self);
    w->io = Qnil;
    w->fd = -1;
    w->can_block = 0;
    w->deadline = 0;
    strata_bytes_clear(&w->in, KEEP);
    strata_bytes_clear(&w->out, KEEP);
    wire_drop_parts(w);
    return Qnil;
}

/* start(timeout): a request begins; its I/O must end within timeout seconds. */
static VALUE wire_start(VALUE self, VALUE timeout)
{
    wire *w = wire_unused(self);
    if (NIL_P(w->io)) wire_raise("Idle", "start on a detached wire");
    double seconds = NUM2DBL(timeout);
    if (!(seconds > 0)) rb_raise(rb_eArgError, "timeout must be positive, got %f", seconds);
    if (strata_bytes_held(&w->in) == 0 && w->in.cap > KEEP) strata_bytes_clear(&w->in, KEEP);
    if (strata_bytes_held(&w->out) == 0 && w->out.cap > KEEP) strata_bytes_clear(&w->out, KEEP);
    w->deadline = monotonic_now() + seconds;
    return self;
}

/* stop: the request is over; I/O raises Wire::Idle until the next start. */
static VALUE wire_stop(VALUE self)
{
    wire_unused(self)->deadline = 0;
    return Qnil;
}

/* write(*strings): queues strings in order. Short ones are gathered in `out` (up to
 * WRITE_BUFFER bytes), so a command and its CRLF cost no extra send; a string of STRAIGHT bytes
 * or more (a value) is never copied, and leaves from its own bytes in the same sendmsg as the
 * command around it. Nothing is sent until a read, a flush, or a full queue. */
static VALUE wire_write(int argc, VALUE *argv, VALUE self)
{
    wire *w = wire_active(self);
    for (int i = 0; i < argc; i++) {
        VALUE str = argv[i];
        StringValue(str);
        wire_queue(w, str);
    }
    return Qnil;
}

/* flush: sends what write gathered. read_line and read_bytes flush first. */
static VALUE wire_flush(VALUE self)
{
    wire_flush_out(wire_active(self));
    return Qnil;
}

/* read_line: the next reply line without its "\r\n", as a binary string. */
static VALUE wire_read_line(VALUE self)
{
    wire *w = wire_active(self);
    wire_flush_out(w);
    size_t from = 0;
    ssize_t crlf;
    while ((crlf = strata_bytes_find_crlf(&w->in, from)) < 0) {
        size_t held = strata_bytes_held(&w->in);
        if (held > MAX_LINE) wire_raise("Malformed", "sent a line longer than %d bytes", MAX_LINE);
        from = held > 0 ? held - 1 : 0; /* a "\r" may end what is held */
        wire_fill(w);
    }
    VALUE line = rb_str_new(strata_bytes_head(&w->in), crlf);
    strata_bytes_consume(&w->in, (size_t)crlf + 2);
    return line;
}

/* read_bytes(n): exactly n bytes of data and the "\r\n" after them (a VA reply's data block);
 * the data as a binary string. */
static VALUE wire_read_bytes(VALUE self, VALUE size)
{
    wire *w = wire_active(self);
    long n = NUM2LONG(size);
    if (n < 0) rb_raise(rb_eArgError, "negative data block size %ld", n);
    if (n > MAX_DATA_BLOCK) wire_raise("Malformed", "announced a data block of %ld bytes", n);
    wire_flush_out(w);
    size_t need = (size_t)n + 2;
    size_t held = strata_bytes_held(&w->in);
    if (held < need) wire_reserve(&w->in, need - held < RESERVE_AHEAD ? need - held : RESERVE_AHEAD);
    while (strata_bytes_held(&w->in) < need) wire_fill(w);
    const char *head = strata_bytes_head(&w->in);
    if (head[n] != '\r' || head[n + 1] != '\n') {
        wire_raise("Malformed", "data block of %ld bytes is not followed by \\r\\n", n);
    }
    VALUE data = rb_str_new(head, n);
    strata_bytes_consume(&w->in, need);
    return data;
}

/* unread?: true when reply bytes are buffered that nobody read. */
static VALUE wire_unread_p(VALUE self)
{
    return strata_bytes_held(&wire_unused(self)->in) > 0 ? Qtrue : Qfalse;
}

void strata_init_wire(void)
{
    VALUE mStrata = rb_define_module("Strata");
    VALUE mMeta = rb_define_module_under(mStrata, "Meta");
    VALUE c = rb_define_class_under(mMeta, "Wire", rb_cObject);
    pthread_atfork(NULL, NULL, count_fork);
    rb_define_alloc_func(c, wire_alloc);
    rb_define_method(c, "attach", wire_attach, 1);
    rb_define_method(c, "detach", wire_detach, 0);
    rb_define_method(c, "start", wire_start, 1);
    rb_define_method(c, "stop", wire_stop, 0);
    rb_define_method(c, "write", wire_write, -1);
    rb_define_method(c, "flush", wire_flush, 0);
    rb_define_method(c, "read_line", wire_read_line, 0);
    rb_define_method(c, "read_bytes", wire_read_bytes, 1);
    rb_define_method(c, "unread?", wire_unread_p, 0);
}
