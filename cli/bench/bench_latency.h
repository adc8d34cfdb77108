/*
 * bench_latency.h - `nanovllm bench --latency`: model load time, prefill
 * tokens/s for one prompt of input_len random tokens, single-stream decode
 * tokens/s over output_len tokens and the peak resident memory, each beside
 * the machine's own limit measured in the same run.
 */
#ifndef NANOVLLM_BENCH_LATENCY_H
#define NANOVLLM_BENCH_LATENCY_H

#include <stdbool.h>

#include "engine/runner.h"

typedef struct LatencyConfig {
    const char *model_dir; /* for the report */
    int input_len, output_len, seed;
    bool json; /* one JSON object on stdout instead of the table */
} LatencyConfig;

/* Runs on a runner made for w, whose load took load_seconds, and prints. */
int bench_latency(const ModelWeights *w, Runner *runner, double load_seconds,
                  const LatencyConfig *c, Error *err);

#endif
