/*
 * bench_tally.h - what the engine benchmarks count of their requests'
 * outputs (bench_throughput.c, bench_admission.c): tokens, requests that
 * have their first token, finished requests and the first error.
 */
#ifndef NANOVLLM_BENCH_TALLY_H
#define NANOVLLM_BENCH_TALLY_H

#include "engine/engine.h"

typedef struct BenchTally {
    long tokens;
    int started; /* requests that have their first token */
    int finished;
    char error[256]; /* the first failed request's message */
} BenchTally;

/* An EngineOutputFn: user is the BenchTally the request counts into. */
void bench_tally_output(const EngineOutput *o, void *user);

#endif
