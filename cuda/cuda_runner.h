/*
 * cuda_runner.h - the Qwen3 forward pass on an NVIDIA GPU, behind runner.h.
 *
 * bf16 weights (an FP8 checkpoint's layer matrices stay FP8, cuda_weights.h)
 * and KV cache (--kv-cache-dtype fp8: e4m3 bytes with a scale, read as such
 * by every attention kernel, cuda_kv_fp8.h), float32 residual stream and accumulation, cuBLAS GEMMs and
 * the kernels of cuda_kernels.h (cuda_matmul.h picks per matrix and batch).
 * The KV cache takes what --gpu-memory-utilization leaves after the weights
 * and a warm-up step at the largest batch, as nano-vllm sizes it. Tokens are chosen on the GPU
 * (cuda_sampler.h: penalties, temperature, min-p, top-k, top-p and the
 * seeded draw, with the CPU sampler's exact arithmetic) and only they come
 * back; a request that asks for logprobs has its row of raw logits copied
 * back and goes through the CPU sampler (sampler.h). Decode steps replay
 * CUDA graphs unless --enforce-eager.
 *
 * Built without CUDA, cuda_runner_create() says so (cuda_device_none.c).
 */
#ifndef NANOVLLM_CUDA_RUNNER_H
#define NANOVLLM_CUDA_RUNNER_H

#ifdef __cplusplus
extern "C" {
#endif

#include "engine/runner.h"

Runner *cuda_runner_create(const ModelWeights *model, const RunnerOptions *opts, Error *err);

/* The layers with K and V: all of them, but a hybrid model's full-attention
 * layers only (its Gated DeltaNet layers keep a recurrent state instead). */
static inline int cuda_runner_kv_layers(const ModelConfig *cfg) {
    return cfg->num_layers - (cfg->hybrid ? cfg->num_linear_layers : 0);
}

/* Bytes of one KV block on the GPU: K and V of every KV layer, bf16 (any
 * dtype but fp8, as the runner resolves them) or one e4m3 byte a value
 * (KV_CACHE_FP8: twice the tokens in the same memory). */
static inline size_t cuda_runner_block_bytes(const ModelConfig *cfg, int block_size, KvCacheDtype dtype) {
    return 2 * (dtype == KV_CACHE_FP8 ? 1 : sizeof(uint16_t)) * (size_t)cuda_runner_kv_layers(cfg) *
           (size_t)block_size * (size_t)cfg->num_kv_heads * (size_t)cfg->head_dim;
}

#ifdef __cplusplus
}
#endif

#endif
