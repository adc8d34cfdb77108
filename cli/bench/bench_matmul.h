/*
 * bench_matmul.h - `nanovllm bench --matmul`: the CPU matmul strategies
 * (row kernels, small-batch GEMM, BLAS, AMX) side by side at 1..512 rows of
 * Qwen3-0.6B's bf16 projection shapes and lm_head, against the machine's FMA
 * peak: how the thresholds in cpu/cpu_matmul.c were chosen.
 */
#ifndef NANOVLLM_BENCH_MATMUL_H
#define NANOVLLM_BENCH_MATMUL_H

#include "base/error.h"

/* num_threads 0: one per core. Prints a table on stdout. */
int bench_matmul(int num_threads, Error *err);

#endif
