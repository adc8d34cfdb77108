/*
 * word_cache.c - see word_cache.h.
 */
#include "word_cache.h"

#include <stdlib.h>
#include <string.h>

#define SLOTS (1u << 15)
#define MAX_PROBES 8
#define MAX_ENTRY_BYTES (2u << 20)

typedef struct EntryHead {
    uint16_t word_len, n_ids;
} EntryHead;

static size_t entry_size(size_t n, int n_ids) {
    return (sizeof(EntryHead) + (size_t)n_ids * sizeof(int32_t) + n + 3) & ~(size_t)3;
}

int word_cache_get(const WordCache *c, const unsigned char *w, size_t n, uint64_t hash,
                   const int32_t **ids) {
    if (!c->slots) return -1;
    uint32_t tag = (uint32_t)(hash >> 32);
    for (uint32_t k = 0, i = (uint32_t)hash & c->mask; k < MAX_PROBES; k++, i = (i + 1) & c->mask) {
        uint64_t s = c->slots[i];
        if (!s) return -1;
        if ((uint32_t)(s >> 32) != tag) continue;
        const char *e = c->entries.data + (uint32_t)s - 1;
        EntryHead h;
        memcpy(&h, e, sizeof h);
        const int32_t *v = (const int32_t *)(e + sizeof h);
        if (h.word_len == n && memcmp(v + h.n_ids, w, n) == 0) {
            *ids = v;
            return h.n_ids;
        }
    }
    return -1;
}

void word_cache_put(WordCache *c, const unsigned char *w, size_t n, uint64_t hash,
                    const int32_t *ids, int n_ids) {
    if (n > WORD_CACHE_MAX_WORD || n_ids < 0 || (size_t)n_ids > n) return;
    if (!c->slots) {
        c->slots = calloc(SLOTS, sizeof *c->slots);
        if (!c->slots) return;
        c->mask = SLOTS - 1;
    }
    size_t size = entry_size(n, n_ids);
    if (c->count >= SLOTS / 4 * 3 || c->entries.len + size > MAX_ENTRY_BYTES) {
        memset(c->slots, 0, SLOTS * sizeof *c->slots);
        c->entries.len = 0;
        c->count = 0;
    }
    if (byte_buf_reserve(&c->entries, size)) return;
    uint32_t home = (uint32_t)hash & c->mask, slot = home;
    for (uint32_t k = 0; k < MAX_PROBES && c->slots[slot]; k++) slot = (slot + 1) & c->mask;
    if (c->slots[slot]) slot = home; /* a full neighbourhood: replace the first */
    else c->count++;
    char *e = c->entries.data + c->entries.len;
    EntryHead h = {(uint16_t)n, (uint16_t)n_ids};
    memcpy(e, &h, sizeof h);
    memcpy(e + sizeof h, ids, (size_t)n_ids * sizeof *ids);
    memcpy(e + sizeof h + (size_t)n_ids * sizeof *ids, w, n);
    c->slots[slot] = (uint64_t)(uint32_t)(hash >> 32) << 32 | (uint32_t)(c->entries.len + 1);
    c->entries.len += size;
}

void word_cache_free(WordCache *c) {
    free(c->slots);
    byte_buf_free(&c->entries);
    memset(c, 0, sizeof *c);
}
