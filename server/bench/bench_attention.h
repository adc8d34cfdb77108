/*
 * bench_attention.h - `nanovllm bench --attention`: the GPU's decode
 * attention for num_seqs sequences of input_len tokens (Qwen3-0.6B's head
 * shape), split and unsplit, against the GPU's copy bandwidth measured in
 * the same run (cuda/cuda_bench.h). Without a GPU it says so.
 */
#ifndef NANOVLLM_BENCH_ATTENTION_H
#define NANOVLLM_BENCH_ATTENTION_H

#include <stdbool.h>

#include "engine/base/error.h"

int bench_attention(int num_seqs, int input_len, int block_size, bool json, Error *err);

#endif
