/*
 * cpu_runner.h - the CPU backend of runner.h: the reference implementation.
 *
 * float32 activations, a float32 or bf16 KV cache (--kv-cache-dtype), bf16
 * (or f32) weights read in place from the checkpoint mapping. Always built, always tested; it must agree with
 * the numpy reference (../shared/tools/qwen3_ref.py) to float32 precision.
 */
#ifndef NANOVLLM_CPU_RUNNER_H
#define NANOVLLM_CPU_RUNNER_H

#include "engine/runner.h"

Runner *cpu_runner_create(const ModelWeights *model, const RunnerOptions *opts, Error *err);

/* Bytes of KV cache one block takes on the CPU (K and V, all layers), for a
 * resolved dtype (kv_cache_dtype_resolve: bf16 or f32). */
size_t cpu_runner_block_bytes(const ModelConfig *cfg, int block_size, KvCacheDtype dtype);

#endif
