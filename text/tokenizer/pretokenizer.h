/*
 * pretokenizer.h - splitting normalized text into the words BPE runs on.
 *
 * Byte-level BPE tokenizers cut text with a regex before BPE (Qwen2/3,
 * Llama 3, GPT-2 each have theirs). The tokenizer.json regex is the
 * configuration: the Qwen2/3 and Llama 3 patterns, recognised by their
 * exact text, run on a hand-written splitter; any other pattern runs on
 * PCRE2 (JIT) after translating Oniguruma's \s to the same White_Space set.
 * Pieces come out in order through a callback, never as a list.
 */
#ifndef NANOVLLM_PRETOKENIZER_H
#define NANOVLLM_PRETOKENIZER_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

typedef enum {
    PRETOK_WHOLE,  /* no pre-tokenizer regex: the text is one word */
    PRETOK_NATIVE, /* the Qwen2/3 or Llama 3 pattern, hand-written */
    PRETOK_PCRE2,  /* any other pattern */
} PretokKind;

typedef struct PreTokenizer {
    PretokKind kind;
    int max_digits;     /* native: \p{N} (1, Qwen) or \p{N}{1,3} (3, Llama 3) */
    void *code;         /* pcre2_code_8, PRETOK_PCRE2 only */
    char *pattern;      /* the Oniguruma pattern as written (NULL for WHOLE) */
} PreTokenizer;

/* Per-thread state PCRE2 needs (its match data); zero-initialise. */
typedef struct PretokScratch {
    void *match_data;
    const void *for_code;
} PretokScratch;

/* Receives each piece; returns 0 to go on, -1 to stop with an error. */
typedef int (*PieceFn)(void *ctx, const char *piece, size_t len);

/* A Split(regex, Isolated) pre-tokenizer: the pattern (Oniguruma syntax as
 * in tokenizer.json) decides native or PCRE2. force_pcre2 compiles even a
 * known pattern with PCRE2 (to compare the two; see tokenizer_bench). */
int pretokenizer_init_regex(PreTokenizer *pt, const char *pattern, bool force_pcre2, Error *err);

/* The GPT-2 regex that ByteLevel(use_regex=true) applies, and Qwen2/3's. */
extern const char PRETOK_GPT2_PATTERN[];
extern const char PRETOK_QWEN_PATTERN[];

void pretokenizer_free(PreTokenizer *pt);
void pretok_scratch_free(PretokScratch *s);

/* Calls fn for every non-empty piece of well-formed UTF-8 s[0..n), the
 * regex's matches and the text between them (Isolated). Returns 0, or -1
 * with err set (fn failed, out of memory, or a PCRE2 match error). */
int pretokenizer_split(const PreTokenizer *pt, const char *s, size_t n, PretokScratch *scratch,
                       PieceFn fn, void *ctx, Error *err);

#endif
