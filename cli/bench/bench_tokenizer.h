/*
 * bench_tokenizer.h - `nanovllm tokenize --bench`: single-thread tokenizer
 * timings (load, encode, decode) on deterministic mixed text, and with
 * --chat the chat template's render time.
 */
#ifndef NANOVLLM_BENCH_TOKENIZER_H
#define NANOVLLM_BENCH_TOKENIZER_H

#include <stdbool.h>

#include <jansson.h>

#include "base/error.h"
#include "chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

typedef struct TokenizerBenchArgs {
    int megabytes;          /* generated text size */
    int runs;               /* encode/decode passes */
    const char *text_path;  /* JSON lines of documents instead of generated text */
    const char *write_path; /* write the documents used as JSON lines */
    const char *check_path; /* expected ids, JSON lines of lists, one per document */
} TokenizerBenchArgs;

int bench_tokenizer(const Tokenizer *t, const char *model_dir, const TokenizerBenchArgs *a,
                   bool json, Error *err);

/* Renders request `runs` times (after one warm-up) and prints the median,
 * best and mean milliseconds per render, and the prompt's size. */
int bench_chat_template(const ChatTemplate *ct, const json_t *request, int runs, bool json,
                        Error *err);

#endif
