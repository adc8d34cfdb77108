/*
 * tokenizer_json.h - reading tokenizer.json fast.
 *
 * A Qwen3 tokenizer.json is 11 MB, almost all of it model.vocab (151,643
 * entries) and model.merges (151,387 pairs). jansson alone takes ~180 ms
 * to build that tree and ~60 ms to free it here, over the whole load budget
 * (150 ms), for two flat tables we copy into our own structures anyway.
 * So this file finds those two values in the text and reads them directly
 * (full JSON string syntax: escapes, surrogate pairs, UTF-8 validation),
 * and jansson parses everything else, which is small and free-form (added
 * tokens, normalizer, pre-tokenizer, decoder, model options).
 */
#ifndef NANOVLLM_TOKENIZER_JSON_H
#define NANOVLLM_TOKENIZER_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct JsonSpan {
    const char *p; /* NULL when the key is absent */
    size_t n;
} JsonSpan;

typedef int (*VocabEntryFn)(void *ctx, const char *token, size_t len, int64_t id, Error *err);
typedef int (*MergeEntryFn)(void *ctx, const char *a, size_t alen, const char *b, size_t blen,
                            Error *err);

/* Where the two tables go: each "token": id of model.vocab, then once after
 * the last one vocab_end, then each merge in order ("a b" strings or
 * ["a", "b"] pairs). */
typedef struct TableReader {
    void *ctx;
    VocabEntryFn token;
    int (*vocab_end)(void *ctx, Error *err);
    MergeEntryFn merge;
} TableReader;

/* What tokenizer_json_open() read, and what it left to the caller. */
typedef struct TokenizerJson {
    json_t *doc;            /* everything but the two tables (json_decref it) */
    bool vocab_read, merges_read;
    JsonSpan vocab, merges; /* a table not read yet (p NULL when absent) */
} TokenizerJson;

/* Reads text[0..len): in one pass, model.vocab and model.merges go
 * straight to r when "type": "BPE" precedes them (as Hugging Face writes
 * the file); otherwise their spans are returned for the caller to read
 * with tokenizer_json_vocab/merges once it has checked the model type.
 * The rest of the document, with the tables replaced by {} and [], is
 * parsed by jansson (duplicate keys rejected). */
int tokenizer_json_open(const char *text, size_t len, const TableReader *r, TokenizerJson *out,
                        Error *err);

int tokenizer_json_vocab(JsonSpan span, const TableReader *r, Error *err);
int tokenizer_json_merges(JsonSpan span, const TableReader *r, Error *err);

#endif
