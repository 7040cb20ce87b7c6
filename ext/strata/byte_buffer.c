/* byte_buffer.c - see byte_buffer.h for the layout and invariants. */
#include "byte_buffer.h"

#include <stdlib.h>
#include <string.h>

int strata_bytes_reserve(strata_bytes *b, size_t room)
{
    if (b->cap - b->end >= room) return 0;
    size_t held = strata_bytes_held(b);
    if (b->start > 0) {
        /* Dropping the consumed front is a memmove of what is held: cheap next to a recv. */
        memmove(b->data, b->data + b->start, held);
        b->start = 0;
        b->end = held;
        if (b->cap - b->end >= room) return 0;
    }
    if (room > (size_t)-1 / 2 - held) return -1;
    size_t want = held + room;
    size_t cap = b->cap * 2;
    if (cap < want) cap = want;
    char *data = realloc(b->data, cap);
    if (data == NULL) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

int strata_bytes_append(strata_bytes *b, const void *p, size_t n)
{
    if (n == 0) return 0;
    if (strata_bytes_reserve(b, n) != 0) return -1;
    memcpy(b->data + b->end, p, n);
    b->end += n;
    return 0;
}

ssize_t strata_bytes_find_crlf(const strata_bytes *b, size_t from)
{
    size_t held = strata_bytes_held(b);
    if (held < 2 || from > held - 2) return -1;
    const char *head = b->data + b->start;
    const char *hit = memmem(head + from, held - from, "\r\n", 2);
    return hit ? (ssize_t)(hit - head) : -1;
}

void strata_bytes_clear(strata_bytes *b, size_t keep)
{
    b->start = b->end = 0;
    if (b->cap <= keep) return;
    if (keep == 0) {
        strata_bytes_free(b);
        return;
    }
    char *data = realloc(b->data, keep);
    if (data == NULL) return; /* keeping the larger block is harmless */
    b->data = data;
    b->cap = keep;
}

void strata_bytes_free(strata_bytes *b)
{
    free(b->data);
    b->data = NULL;
    b->start = b->end = b->cap = 0;
}
