/*
 * cpu_attention_decode.h - attention of ONE query token (decode) over the
 * paged KV cache, without a matrix-multiply call per block.
 *
 * A decode tile is G rows (the query heads sharing a KV head, 2 in
 * Qwen3-0.6B): too few for sgemm's packing to pay off, and the step is bound
 * by reading the cache. These kernels read each key and value row once for
 * the whole group (G dot products per K row, G FMAs per V row), keep an
 * online softmax per block, and read a float32, bf16 or fp8 (e4m3) cache
 * directly, widening in registers.
 * Versions for AVX-512 and AVX2+FMA (per-function target attributes, as
 * cpu_matmul.c) and a portable scalar reference; the caller passes the ISA
 * (cpu_isa_active() in the runner, each level in the tests). The softmax's
 * exponentials go through exp_shifted_sum (cpu_ops.h), which follows
 * cpu_isa_active().
 *
 * A call covers a key range [k0, k1) and leaves an unnormalized partial
 * (running max, sum of exponentials, weighted sum of values) so that a long
 * context can be split across threads and the parts merged
 * (flash-decoding); decode_finish() merges and normalizes.
 */
#ifndef NANOVLLM_CPU_ATTENTION_DECODE_H
#define NANOVLLM_CPU_ATTENTION_DECODE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/cpu_isa.h"
#include "engine/runner.h"

/* Where one KV head's keys and values are, in the CPU cache's head-major
 * blocks ([num_blocks, num_kv_heads, block_size, head_dim]): the row of
 * position p is at element ((block_table[p / block_size] * num_kv_heads +
 * kv_head) * block_size + p % block_size) * head_dim of k and v (float,
 * uint16_t bf16, or uint8_t e4m3 read as e4m3 * k_scale / v_scale: the
 * dtype, resolved, says which), so a block's rows of one head are adjacent. */
typedef struct DecodeKv {
    const void *k, *v;
    KvCacheDtype dtype; /* KV_CACHE_F32, KV_CACHE_BF16 or KV_CACHE_FP8 */
    const int32_t *block_table;
    int block_size;
    int num_kv_heads;
    int kv_head, head_dim;
    float k_scale, v_scale; /* fp8 only (runner.h) */
    bool bf16_products;     /* bf16 and fp8: q and p may be rounded to bf16 (--dtype bfloat16;
                               cpu_attention_decode_dot.h) */
} DecodeKv;

/* The partial result of G query heads over a key range. */
typedef struct DecodePart {
    float *max; /* [G]: largest scaled score seen (-inf before any key) */
    float *sum; /* [G]: sum of exp(score - max) */
    float *acc; /* [G, head_dim]: sum of exp(score - max) * v */
} DecodePart;

/* Attends q [G, head_dim] (scaled inside by 1/sqrt(head_dim)) to keys
 * [k0, k1), k0 < k1, overwriting `part`. scores: scratch of G * block_size
 * floats. */
void decode_attend_range(CpuIsa isa, const DecodeKv *kv, const float *q, int G, int k0, int k1,
                         float *scores, DecodePart part);

/* out [G, head_dim] (head g at out + g * out_stride) from n partials of the
 * same query over disjoint key ranges. */
void decode_finish(float *out, int out_stride, const DecodePart *parts, int n, int G,
                   int head_dim);

#endif
