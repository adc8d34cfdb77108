/*
 * cpu_attention_decode_dot.h - decode attention's inner loops on
 * vdpbf16ps, for a bf16 and an fp8 cache, on CPUs with AVX512-BF16 and
 * VBMI (cpu_isa_byte_lookup: Zen 4, Sapphire Rapids). cpu_attention_decode.c
 * picks them under bf16 products (DecodeKv.bf16_products: --dtype
 * bfloat16, which rounds every matmul's input to bf16 anyway, and whose
 * prompt tiles over a bf16 cache round Q and P the same way); everywhere
 * else the float32 kernels of that file run.
 *
 * Unlike those (float32 products of the widened values), these round q to
 * bf16, nearest even, once per block, and each softmax weight p to bf16
 * before its product with V: relative errors <= 2^-8 each (bf16 keeps 8
 * significant bits; e4m3's own rounding of K and V is <= 2^-4). p's
 * rounding moves an output by at most 2^-8 of the largest |v| of its
 * keys; q's moves a score by at most 2^-8 of scale * sum |q_e k_e|.
 */
#ifndef NANOVLLM_CPU_ATTENTION_DECODE_DOT_H
#define NANOVLLM_CPU_ATTENTION_DECODE_DOT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/cpu_isa.h"

/* A bf16 cache's float32 kernels read at its rows' rate up to 4 heads a
 * KV head and fall behind past that (Zen 4, 16 x 2,048 keys: 2 heads
 * 93-107% of the plain read, these 90-94%; 4 heads 83% and 81%; 8 heads
 * 36% and 60%), so a bf16 cache takes these from 5 heads. An fp8 cache's
 * float32 kernels are bound by their widening at any group. */
#define DOT_BF16_MIN_GROUP 5

/* Whether the kernels for a bf16 or an fp8 cache run at `isa` for this
 * head size (a multiple of 64, at most 512) and group of query heads. */
bool dot_kernels_fit(CpuIsa isa, bool fp8, int head_dim, int group);

/* cpu_attention_decode_kernels.h's QkFn and PvFn, for fp8 (e4m3 * 2^-8)
 * or bf16 rows; only where dot_kernels_fit. */
void qk_fp8_dot(float *s, int lds, const float *q, int G, int D, const void *k, size_t stride, int n,
                float scale);
void pv_fp8_dot(float *acc, const float *p, int lds, int G, int D, const void *v, size_t stride, int n);
void qk_bf16_dot(float *s, int lds, const float *q, int G, int D, const void *k, size_t stride, int n,
                 float scale);
void pv_bf16_dot(float *acc, const float *p, int lds, int G, int D, const void *v, size_t stride, int n);

#endif
