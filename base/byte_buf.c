/*
 * byte_buf.c - see byte_buf.h.
 */
#include "byte_buf.h"

#include <stdint.h>
#include <stdlib.h>

int array_reserve(void **array, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2) return -1;
        n *= 2;
    }
    if (n > SIZE_MAX / elem) return -1;
    void *p = realloc(*array, n * elem);
    if (!p) return -1;
    *array = p;
    *cap = n;
    return 0;
}

void byte_buf_free(ByteBuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
