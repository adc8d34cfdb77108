/*
 * byte_buf.h - growable byte and array buffers for the tokenizer.
 *
 * Encode and decode build outputs of unknown length; these helpers keep
 * the growth (doubling, overflow-checked) and the out-of-memory check in
 * one place. All return 0 or -1 (out of memory; the buffer is unchanged).
 */
#ifndef NANOVLLM_BYTE_BUF_H
#define NANOVLLM_BYTE_BUF_H

#include <stddef.h>
#include <string.h>

typedef struct ByteBuf {
    char *data;
    size_t len, cap;
} ByteBuf;

/* Makes *array (of elem-byte items, *cap of them) hold at least need items. */
int array_reserve(void **array, size_t *cap, size_t need, size_t elem);

static inline int byte_buf_reserve(ByteBuf *b, size_t extra) {
    if (extra <= b->cap - b->len) return 0;
    if (extra > (size_t)-1 / 2 - b->len) return -1;
    return array_reserve((void **)&b->data, &b->cap, b->len + extra, 1);
}

static inline int byte_buf_append(ByteBuf *b, const void *p, size_t n) {
    if (byte_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

void byte_buf_free(ByteBuf *b);

#endif
