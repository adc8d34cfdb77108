/*
 * bench_limits.h - the machine's own limits, measured by the benchmarks in
 * the same run as what they time, so that their results read as fractions of
 * this machine's limits rather than as absolute numbers (the development
 * host's read rate swings by 2x from one minute to the next): the memory read
 * rate here, the FMA peaks in bench_matmul.c on top of bench_fastest_run.
 */
#ifndef NANOVLLM_BENCH_LIMITS_H
#define NANOVLLM_BENCH_LIMITS_H

#include <stddef.h>

#include "cpu/thread_pool.h"

/* Bytes per second of reading `bytes` of memory once with the pool's threads,
 * from huge pages: the best of 3 passes over a fresh buffer of that size, or
 * of MEMORY_PROBE_MIN_BYTES if that is more (the caches must not hold it: an
 * earlier development host had a 480 MB L3). 0 if it cannot be mapped. */
#define MEMORY_PROBE_MIN_BYTES ((size_t)1 << 30)
double memory_read_bandwidth(ThreadPool *pool, size_t bytes);

/* Seconds of the fastest of `passes` runs of thread_pool_run(pool, num_tasks,
 * fn, ctx): the machine's rate, less the moments another tenant took. */
double bench_fastest_run(ThreadPool *pool, int num_tasks, ThreadTaskFn fn, void *ctx, int passes);

#endif
