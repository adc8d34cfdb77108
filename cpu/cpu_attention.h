/*
 * cpu_attention.h - causal GQA attention over the paged KV cache, on the CPU.
 *
 * One call per layer attends every new token of every sequence in a batch to
 * its own context (cached prefix + new tokens up to itself) through the
 * sequence's block table. Prefill, prefill after a cached prefix and decode
 * are the same code: only the number of query tokens differs, except that a
 * sequence with one new token (decode) takes the dedicated kernels of
 * cpu_attention_decode.h instead of sgemm. The cache holds float32, bf16 or
 * fp8 (e4m3 with a scale for K and one for V: runner.h, cpu_kv_fp8.h).
 */
#ifndef NANOVLLM_CPU_ATTENTION_H
#define NANOVLLM_CPU_ATTENTION_H

#include <stdbool.h>

#include "thread_pool.h"
#include "engine/runner.h"

typedef struct CpuAttention CpuAttention;

typedef struct AttentionShape {
    int num_heads, num_kv_heads, head_dim, block_size;
} AttentionShape;

/* For a float32 cache; cpu_attention_create_kv for a resolved dtype:
 * KV_CACHE_F32 (float elements), KV_CACHE_BF16 (uint16_t) or KV_CACHE_FP8
 * (uint8_t e4m3, scales KV_FP8_DEFAULT_SCALE until set). auto is refused. */
CpuAttention *cpu_attention_create(ThreadPool *pool, AttentionShape shape, int max_num_seqs,
                                   int max_num_tokens, Error *err);
CpuAttention *cpu_attention_create_kv(ThreadPool *pool, AttentionShape shape, KvCacheDtype kv_dtype,
                                      int max_num_seqs, int max_num_tokens, Error *err);
void cpu_attention_destroy(CpuAttention *a);

/* Rounds the query and the softmax weights of prefill tiles to bf16 at the
 * products' inputs (--dtype bfloat16) over a bf16 cache. A float32 cache
 * and decode tokens (bound by reading the cache, not by multiplies) stay
 * exact. */
void cpu_attention_set_bf16_inputs(CpuAttention *a, bool on);

/* An fp8 cache's scales: values read as e4m3 * k_scale (keys) and
 * e4m3 * v_scale (values); the runner's store divides by the same. */
void cpu_attention_set_fp8_scales(CpuAttention *a, float k_scale, float v_scale);

/* out[T, num_heads * head_dim] for the batch's T new tokens (in batch order),
 * from q[T, num_heads * head_dim] (normed and rotated) and the layer's caches
 * k_cache, v_cache [num_blocks, num_kv_heads, block_size, head_dim] (head-major
 * blocks: a head's rows of a block are adjacent, one sequential read; float,
 * uint16_t bf16 or uint8_t e4m3 as created), which already hold the new
 * tokens' K and V. */
void cpu_attention(CpuAttention *a, float *out, const float *q, const void *k_cache,
                   const void *v_cache, const RunnerBatch *batch);

#endif
