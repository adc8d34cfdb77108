/*
 * bench_matmul.h - `nanovllm bench --matmul`: the CPU matmul strategies
 * (row kernels, BLAS, AMX) side by side at 1..512 rows of a Qwen3-0.6B-sized
 * bf16 weight: how SMALL_M_MAX in cpu/cpu_matmul.c was chosen.
 */
#ifndef NANOVLLM_BENCH_MATMUL_H
#define NANOVLLM_BENCH_MATMUL_H

#include "engine/base/error.h"

/* num_threads 0: one per core. Prints a table on stdout. */
int bench_matmul(int num_threads, Error *err);

#endif
