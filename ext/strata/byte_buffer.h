/*
 * byte_buffer.h - a growable byte buffer with a consumed front: the read and write buffers of
 * the memcached client's socket (wire.c). Plain C, no Ruby, so test/c/byte_buffer_test.c runs it
 * under ASan, UBSan and valgrind.
 *
 * LAYOUT
 *   data[0 .. start)     consumed bytes, dropped by the next strata_bytes_reserve that needs room
 *   data[start .. end)   bytes held: replies not yet parsed, or requests not yet sent
 *   data[end .. cap)     room
 *
 * INVARIANTS
 *   start <= end <= cap; data is NULL exactly when cap is 0.
 *   Held bytes keep their values and order until consumed or cleared; only their address moves
 *   (compaction, growth). Any pointer into data is valid until the next reserve, append or clear.
 *   Memory: cap grows by doubling (at least to what is held plus the room asked for), and clear
 *   gives back anything above its keep argument, so one huge value does not pin its memory.
 */
#ifndef STRATA_BYTE_BUFFER_H
#define STRATA_BYTE_BUFFER_H

#include <stddef.h>
#include <sys/types.h>

typedef struct strata_bytes {
    char *data;
    size_t start, end, cap;
} strata_bytes;

/* Bytes held (end - start). */
static inline size_t strata_bytes_held(const strata_bytes *b) { return b->end - b->start; }

/* The first held byte. Valid while strata_bytes_held(b) > 0. */
static inline char *strata_bytes_head(const strata_bytes *b) { return b->data + b->start; }

/* Drops the first n held bytes (all of them when n > held). Emptied, the buffer restarts at
 * offset 0. */
static inline void strata_bytes_consume(strata_bytes *b, size_t n)
{
    b->start += n < strata_bytes_held(b) ? n : strata_bytes_held(b);
    if (b->start == b->end) b->start = b->end = 0;
}

/* Makes room for at least `room` bytes after end, moving held bytes to the front or growing.
 * Returns 0, or -1 when memory ran out (the buffer is then unchanged). */
int strata_bytes_reserve(strata_bytes *b, size_t room);

/* Appends n bytes. Returns 0, or -1 when memory ran out (nothing appended). */
int strata_bytes_append(strata_bytes *b, const void *p, size_t n);

/* Offset, counted from the first held byte, of the first "\r\n" that starts at or after held
 * offset `from`; -1 when there is none. */
ssize_t strata_bytes_find_crlf(const strata_bytes *b, size_t from);

/* Forgets every held byte. Memory above `keep` bytes is given back. */
void strata_bytes_clear(strata_bytes *b, size_t keep);

/* Gives back all memory; the buffer is then empty and reusable. */
void strata_bytes_free(strata_bytes *b);

#endif
