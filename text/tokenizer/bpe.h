/*
 * bpe.h - the byte-level BPE model: vocabulary, merge ranks, and merging.
 *
 * tokenizer.json writes byte-level tokens in GPT-2's printable alphabet
 * (byte 0x20 is "Ġ", ...). The model keeps every token as the raw bytes it
 * stands for instead, so encoding runs on the text's own bytes with no
 * mapping pass, and decoding is a copy. A token with a character outside
 * that alphabet cannot come out of BPE; it keeps its UTF-8 bytes for
 * decoding, as Hugging Face's ByteLevel decoder does.
 *
 * Merging follows Hugging Face's BPE exactly: the adjacent pair with the
 * lowest merge rank merges first, the leftmost among equals.
 */
#ifndef NANOVLLM_BPE_H
#define NANOVLLM_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/byte_buf.h"
#include "base/error.h"

typedef struct MergeSlot {
    uint64_t pair; /* left id << 32 | right id; all ones (rank UINT32_MAX) when empty */
    uint32_t rank;
    int32_t merged;
} MergeSlot;

typedef struct Bpe {
    int32_t num_ids;     /* 1 + the largest vocabulary id */
    int32_t num_tokens;  /* vocabulary entries */
    /* By id: the token's bytes (for decoding; len -1 for an id the
     * vocabulary lacks) and whether BPE can produce it. */
    size_t ids_cap;
    uint32_t *offset;
    int32_t *len;
    uint8_t *reachable;
    ByteBuf bytes;
    size_t max_token_bytes;
    /* Raw bytes -> id, for tokens BPE can produce (open addressing). */
    int32_t *vocab_slots;
    uint32_t vocab_mask;
    /* (left, right) -> rank and merged id (open addressing). */
    MergeSlot *merge_slots;
    uint32_t merge_mask;
    uint32_t num_merges;
    int32_t byte_id[256]; /* single-byte tokens, -1 when absent */
    /* The merge of every pair of single-byte tokens, by (first << 8 | second):
     * a word's first lookups, from a 512 KB table that stays in cache.
     * NULL unless all 256 byte tokens exist. */
    struct BytePair {
        uint32_t rank;
        int32_t merged;
    } *byte_pairs;
    int32_t unk_id;       /* -1 when the model has no unknown token */
    bool fuse_unk;
    bool ignore_merges;   /* a word that is itself a token is not merged */
} Bpe;

/* Work memory for merging one word (one per thread); zero-initialise. */
typedef struct BpeScratch {
    int32_t *sym, *prev, *next, *merged;
    uint32_t *rank;
    uint64_t *heap;
    size_t cap, heap_cap;
} BpeScratch;

/* Loading, in this order: bpe_init, bpe_add_token for every vocabulary
 * entry, bpe_finish_vocab, bpe_add_merge for every merge in rank order,
 * bpe_finish. */
int bpe_init(Bpe *b, Error *err);
/* tok: the token as written in tokenizer.json (UTF-8, byte-level alphabet). */
int bpe_add_token(Bpe *b, const char *tok, size_t len, int64_t id, Error *err);
int bpe_finish_vocab(Bpe *b, Error *err);
int bpe_add_merge(Bpe *b, const char *left, size_t left_len, const char *right, size_t right_len,
                  Error *err);
int bpe_finish(Bpe *b, Error *err);
void bpe_free(Bpe *b);

/* The id of the token whose tokenizer.json text is tok, or -1. */
int32_t bpe_token_to_id(const Bpe *b, const char *tok, size_t len);

/* The id of the token with these raw bytes, or -1. */
int32_t bpe_lookup_bytes(const Bpe *b, const void *bytes, size_t len);

/* Tokens of one pre-tokenized word (raw bytes, n >= 1): writes at most n
 * ids to out and returns how many, or -1 when out of memory. */
int bpe_encode_word(const Bpe *b, const unsigned char *w, size_t n, int32_t *out, BpeScratch *s);

/* The same with a chosen algorithm, for tests: 0 picks by length, 1 is the
 * quadratic scan (short words), 2 the heap (long words). */
int bpe_encode_word_with(const Bpe *b, const unsigned char *w, size_t n, int32_t *out,
                         BpeScratch *s, int method);

void bpe_scratch_free(BpeScratch *s);

/* GPT-2's byte-level alphabet: the character that stands for byte b, and
 * the byte a character stands for (-1 when it is not in the alphabet). */
uint32_t bpe_byte_to_char(unsigned char b);
int bpe_char_to_byte(uint32_t cp);

static inline uint64_t bpe_hash_bytes(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
    while (n >= 8) {
        uint64_t w;
        __builtin_memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    __builtin_memcpy(&w, p, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

#endif
