/*
 * bench_throughput.h - the throughput benchmark of `nanovllm bench` (default mode).
 */
#ifndef NANOVLLM_BENCH_THROUGHPUT_H
#define NANOVLLM_BENCH_THROUGHPUT_H

#include <stdbool.h>

#include "engine/engine.h"

typedef struct ThroughputConfig {
    int num_seqs, min_input, max_input, min_output, max_output, seed;
    bool json;     /* one JSON object on stdout instead of the table */
    bool progress; /* a progress line on stderr */
} ThroughputConfig;

/* Runs nano-vllm's bench.py workload through the engine and prints the result. */
int bench_throughput(Engine *e, const ThroughputConfig *cfg, Error *err);

#endif
