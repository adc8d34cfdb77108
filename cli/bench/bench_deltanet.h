/*
 * bench_deltanet.h - `nanovllm bench --deltanet`: the CPU's Gated DeltaNet
 * mixer (cpu/cpu_gated_deltanet.h) alone at Qwen3.5-0.8B's shape, every SIMD
 * level this CPU runs side by side: how its kernels were chosen.
 */
#ifndef NANOVLLM_BENCH_DELTANET_H
#define NANOVLLM_BENCH_DELTANET_H

#include "base/error.h"

/* num_threads 0: one per core. Prints a table on stdout. */
int bench_deltanet(int num_threads, Error *err);

#endif
