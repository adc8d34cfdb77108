/*
 * tokenize_bench.h - `nanovllm tokenize --bench`: single-thread tokenizer
 * timings (load, encode, decode) on deterministic mixed text.
 */
#ifndef NANOVLLM_TOKENIZE_BENCH_H
#define NANOVLLM_TOKENIZE_BENCH_H

#include <stdbool.h>

#include "../engine/error.h"
#include "../engine/tokenizer.h"

typedef struct TokenizeBenchArgs {
    int megabytes;          /* generated text size */
    int runs;               /* encode/decode passes */
    const char *text_path;  /* JSON lines of documents instead of generated text */
    const char *write_path; /* write the documents used as JSON lines */
    const char *check_path; /* expected ids, JSON lines of lists, one per document */
} TokenizeBenchArgs;

int tokenize_bench(const Tokenizer *t, const char *model_dir, const TokenizeBenchArgs *a,
                   bool json, Error *err);

#endif
