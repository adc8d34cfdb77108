/*
 * word_cache.h - remembered BPE results, one word to its token ids.
 *
 * Text repeats its words, so most pre-tokenized words have been merged
 * before; a lookup is one hash of the word and one compare. The cache
 * belongs to one encode state (so to one thread at a time: no locks) and
 * is bounded: when it fills up it is emptied and refills with what the
 * text uses now. Lookups probe a few slots at most, so no input can make
 * them slow.
 */
#ifndef NANOVLLM_WORD_CACHE_H
#define NANOVLLM_WORD_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/byte_buf.h"

#define WORD_CACHE_MAX_WORD 255 /* longer words are rarely repeated */

typedef struct WordCache {
    uint64_t *slots; /* hash tag << 32 | (entry offset + 1); 0 when empty */
    uint32_t mask;
    size_t count;
    ByteBuf entries; /* per entry: u16 word length, u16 id count, ids, word bytes */
} WordCache;

/* Returns the number of ids cached for w (with *ids pointing at them) or -1. */
int word_cache_get(const WordCache *c, const unsigned char *w, size_t n, uint64_t hash,
                   const int32_t **ids);

/* Remembers w -> ids (best effort: out of memory just skips it). */
void word_cache_put(WordCache *c, const unsigned char *w, size_t n, uint64_t hash,
                    const int32_t *ids, int n_ids);

void word_cache_free(WordCache *c);

#endif
