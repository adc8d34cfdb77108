/*
 * bench_attention.h - `nanovllm bench --attention`: decode attention for
 * num_seqs sequences of input_len tokens (Qwen3-0.6B's head shape). On the
 * GPU (bench_attention.c): split and unsplit, against the GPU's copy
 * bandwidth measured in the same run (cuda/cuda_bench.h); without a GPU it
 * says so. With --device cpu (bench_attention_cpu.c): the CPU runner's path
 * over all 28 layers, against a plain read of the same cache rows and the
 * machine's memory read rate, measured in the same run.
 */
#ifndef NANOVLLM_BENCH_ATTENTION_H
#define NANOVLLM_BENCH_ATTENTION_H

#include <stdbool.h>

#include "base/error.h"
#include "engine/runner.h"

int bench_attention(int num_seqs, int input_len, int block_size, bool json, Error *err);

/* num_threads <= 0: one per core; dtype auto is bf16 (the shape's model is). */
int bench_attention_cpu(int num_seqs, int input_len, int block_size, KvCacheDtype dtype,
                        ComputeDtype compute, int num_threads, bool json, Error *err);

#endif
