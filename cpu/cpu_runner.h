/*
 * cpu_runner.h - the CPU backend of runner.h: the reference implementation.
 *
 * float32 activations (rounded to bf16 at each matmul's input under --dtype
 * bfloat16), a float32, bf16 or fp8 (e4m3, scale 1.0) KV cache
 * (--kv-cache-dtype), bf16 (or f32) weights. Always built, always tested; with --dtype float32 it must agree
 * with the numpy reference (scripts/qwen3_ref.py) to float32
 * precision, with bfloat16 within the golden README's bf16 rule.
 */
#ifndef NANOVLLM_CPU_RUNNER_H
#define NANOVLLM_CPU_RUNNER_H

#include "engine/runner.h"

Runner *cpu_runner_create(const ModelWeights *model, const RunnerOptions *opts, Error *err);

/* Bytes of KV cache one block takes on the CPU (K and V, all layers), for a
 * resolved dtype (kv_cache_dtype_resolve: bf16, f32 or fp8: 2, 4 or 1 byte
 * per value, so fp8 fits twice bf16's tokens in the same memory). */
size_t cpu_runner_block_bytes(const ModelConfig *cfg, int block_size, KvCacheDtype dtype);

/* Bytes of one sequence's recurrent state (Qwen3.5's linear layers; 0 for
 * other models): the runner takes one such slot per sequence it may run out
 * of the KV budget (kv_cache_bytes) before cutting it into blocks. */
size_t cpu_runner_state_slot_bytes(const ModelConfig *cfg);

/* --dtype auto on the CPU: bf16 for a bf16 model where the CPU has bf16 dot
 * products (cpu_isa_active() >= AVX512_BF16), else float32; explicit values
 * stay as they are. */
ComputeDtype cpu_runner_dtype_resolve(ComputeDtype d, const ModelWeights *model);

#endif
