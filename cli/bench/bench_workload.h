/*
 * bench_workload.h - nano-vllm's bench.py workload, reproduced exactly.
 *
 * bench.py draws its prompts and lengths with Python's `random` (Mersenne
 * Twister, seed 0): per sequence a prompt length randint(min_in, max_in)
 * and that many ids randint(0, 10000); then per sequence max_tokens
 * randint(min_out, max_out). Re-implementing Python's generator makes our
 * workload the same token for token (seed 0, 256 x [100, 1024]: 142,827
 * prompt and 133,966 output tokens), so throughput compares like for like.
 */
#ifndef NANOVLLM_BENCH_WORKLOAD_H
#define NANOVLLM_BENCH_WORKLOAD_H

#include <stdint.h>

typedef struct PyRandom {
    uint32_t mt[624];
    int index;
} PyRandom;

/* random.seed(seed) for a non-negative int seed below 2^32. */
void pyrandom_seed(PyRandom *r, uint32_t seed);
uint32_t pyrandom_uint32(PyRandom *r);
/* random.randint(a, b), inclusive, for b - a < 2^32. */
long pyrandom_randint(PyRandom *r, long a, long b);

typedef struct BenchWorkload {
    int num_seqs;
    int32_t **prompts;
    int *prompt_lens;
    int *max_tokens;
    long total_prompt_tokens, total_output_tokens;
} BenchWorkload;

/* 0, or -1 when out of memory. */
int bench_workload_make(BenchWorkload *w, int num_seqs, int min_in, int max_in, int min_out,
                        int max_out, uint32_t seed);
void bench_workload_free(BenchWorkload *w);

#endif
