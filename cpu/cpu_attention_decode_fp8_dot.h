/*
 * cpu_attention_decode_fp8_dot.h - decode attention's inner loops over an
 * fp8 cache on vdpbf16ps, for CPUs with AVX512-BF16 and VBMI (the
 * AVX512-BF16 level of cpu_isa_byte_lookup). cpu_attention_decode.c picks
 * them there under bf16 products (DecodeKv.bf16_products: --dtype
 * bfloat16, which rounds every matmul's input to bf16 anyway); everywhere
 * else the float32 kernels of that file run.
 *
 * Unlike those (float32 products of the widened values), these round q to
 * bf16, nearest even, once per block, and each softmax weight p to bf16
 * before its product with V: relative errors <= 2^-8 each (bf16 keeps 8
 * significant bits), as e4m3's own rounding of K and V is <= 2^-4. p's
 * rounding moves an output by at most 2^-8 of the largest |v| of its
 * keys; q's moves a score by at most 2^-8 of scale * sum |q_e k_e|.
 */
#ifndef NANOVLLM_CPU_ATTENTION_DECODE_FP8_DOT_H
#define NANOVLLM_CPU_ATTENTION_DECODE_FP8_DOT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/cpu_isa.h"

/* Whether the kernels run at `isa` for this head size (a multiple of 64,
 * at most 512). */
bool fp8_dot_kernels_fit(CpuIsa isa, int head_dim);

/* cpu_attention_decode_kernels.h's QkFn and PvFn, for fp8 (e4m3 * 2^-8)
 * rows; only where fp8_dot_kernels_fit. */
void qk_fp8_dot(float *s, int lds, const float *q, int G, int D, const void *k, size_t stride, int n,
                float scale);
void pv_fp8_dot(float *acc, const float *p, int lds, int G, int D, const void *v, size_t stride, int n);

#endif
