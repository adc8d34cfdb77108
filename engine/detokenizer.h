/*
 * detokenizer.h - token ids back to text, all at once or one id at a time.
 *
 * Streaming (SSE) and stop strings need text while tokens arrive, but a
 * token may end inside a multi-byte character. The Detokenizer holds such
 * an unfinished character back until the bytes that complete it arrive, so
 * it only ever emits whole characters, and everything it emits joined
 * together is exactly tokenizer_decode() of the same ids (bad bytes become
 * U+FFFD as soon as they are known to be bad; a character still unfinished
 * at the end becomes one U+FFFD in detokenizer_finish).
 */
#ifndef NANOVLLM_DETOKENIZER_H
#define NANOVLLM_DETOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "byte_buf.h"
#include "tokenizer.h"

typedef struct Detokenizer {
    const Tokenizer *t;
    bool skip_special_tokens;
    unsigned char pending[4]; /* a character's first bytes, waiting for the rest */
    size_t n_pending;
    ByteBuf out;
} Detokenizer;

void detokenizer_init(Detokenizer *d, const Tokenizer *t, bool skip_special_tokens);

/* Adds one id. *out (valid until the next call on d) receives the text
 * completed by it, *out_len bytes (often 0). A bad id is an error and
 * changes nothing. */
int detokenizer_push(Detokenizer *d, int32_t id, const char **out, size_t *out_len, Error *err);

/* The end of the stream: the text still held back (U+FFFD for an unfinished
 * character, else nothing). d can then start a new stream. */
int detokenizer_finish(Detokenizer *d, const char **out, size_t *out_len, Error *err);

void detokenizer_free(Detokenizer *d);

#endif
