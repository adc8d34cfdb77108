/*
 * bench_chat_template.h - `nanovllm tokenize --chat --bench`: how long the
 * chat template takes to render one request (scripts/bench_chat_template.sh
 * builds a long conversation with tools and compares with Python's Jinja2).
 */
#ifndef NANOVLLM_BENCH_CHAT_TEMPLATE_H
#define NANOVLLM_BENCH_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>

#include "engine/base/error.h"
#include "engine/tokenizer/chat_template.h"

/* Renders request `runs` times (after one warm-up) and prints the median,
 * best and mean milliseconds per render, and the prompt's size. */
int bench_chat_template(const ChatTemplate *ct, const json_t *request, int runs, bool json,
                        Error *err);

#endif
