/*
 * wire.h - Strata::Meta::Wire: the byte stream of one memcached connection, moved under one
 * deadline per request. wire.c implements it; lib/strata/meta/wire.rb defines its errors and
 * documents the Ruby API; lib/strata/meta/connection.rb owns the socket (connect, fork,
 * interrupted requests) and turns Wire's errors into the client's.
 *
 * Why C: the Ruby version of these loops (deadline arithmetic, buffer offsets, write_nonblock and
 * read_nonblock results) cost more CPU per get than the three syscalls it made.
 *
 * STATE
 *   io, fd     the connected socket (an IO, marked so it stays alive) and its descriptor;
 *              Qnil and -1 while detached.
 *   can_block  the socket is in blocking mode with its receive timeout set (see below).
 *   receiving  a recv without the GVL is writing into `in` (its fork generation + 1, else 0).
 *   deadline   CLOCK_MONOTONIC seconds at which the current request gives up; 0 between requests.
 *   in         replies received and not yet parsed (byte_buffer.h).
 *   out        short request strings gathered and not yet sent.
 *   parts      what is queued to send, in order (at most 16): runs of `out`, and strings of
 *              2 KiB or more (values) held as frozen views and never copied. A send is one
 *              sendmsg with an iovec per part.
 *
 * INVARIANTS
 *   I/O happens only while attached and inside a request (deadline != 0); otherwise Wire::Idle.
 *   Bytes leave in the order they were written: parts are sent front to back, and a part is
 *   dropped only once all its bytes went. Every read flushes the parts first, so a reply is never
 *   awaited for a request that was not sent. A value goes to the socket from its own bytes (no
 *   concatenation or copy); a command and its CRLF are copied into `out`.
 *   No call blocks past the deadline. A wait for a reply is a blocking recv without the GVL
 *   (the socket is put in blocking mode with SO_RCVTIMEO = 20 ms at attach) while 50 ms or more
 *   are left, and otherwise, or under a fiber scheduler, rb_io_wait with the time left. Both
 *   release the GVL and let Thread#raise, Timeout and signals in; rb_io_wait also serves the
 *   fiber scheduler.
 *   While a recv runs without the GVL it writes into `in`: `receiving` is set, and every entry
 *   point refuses to touch the wire (Wire::Idle) until it is cleared, which happens before any
 *   exception can be raised. So does every touch of `in` that follows a wait or an interrupt
 *   check, since another thread may have started a recv meanwhile. `receiving` holds the fork
 *   generation (pthread_atfork) it was set in, so a child forked during a recv is not locked out.
 *   Before each blocking slice the IO is checked to still own the descriptor (another thread
 *   may have closed it, and the number be reused). When a blocking recv returns EAGAIN and the
 *   descriptor is found non-blocking again, waits go back to rb_io_wait for good.
 *   detach leaves the socket in blocking mode with its receive timeout; the owner closes it.
 *   While the socket is not writable, readable replies are drained into `in`, so a pipelined
 *   batch bigger than the socket buffers cannot deadlock against a server that stops reading
 *   while its replies go unread.
 *   An exception (timeout, EOF, a malformed reply, an interrupt) may leave the buffers mid-way:
 *   the owner must detach (close) before the next request. Connection does.
 *   Pointers into the buffers or into a string being sent are re-read after every wait, since
 *   the GVL was given up meanwhile.
 *   Memory follows the bytes that arrive: a data block is reserved for up to 1 MiB ahead, longer
 *   ones grow as they come, and one announced past memcached's 1 GiB item limit is refused
 *   (Wire::Malformed). A buffer that can't grow fails the stream, never NoMemoryError.
 *   A string being written is measured again after any flush (which may wait), and a long one
 *   is queued as a frozen view (marked for the GC while queued), so a caller's thread changing
 *   it can't make us read past its end or send bytes it wrote later.
 *   Misuse by two callers at once garbles the stream but never memory: consume is clamped, and
 *   a send checks that `out` still holds what its parts say.
 *   sendmsg and every recv but the blocking one use MSG_DONTWAIT (sendmsg also MSG_NOSIGNAL), so the
 *   descriptor's blocking mode matters to the blocking recv only.
 *   No lock is held anywhere here.
 */
#ifndef STRATA_WIRE_H
#define STRATA_WIRE_H

/* Defines Strata::Meta::Wire. Called from Init_strata_ext. */
void strata_init_wire(void);

#endif
