/*
 * cpu_matmul_bf16.h - y = x . W^T with bf16 activations and bf16 weights,
 * accumulated in float32: the CPU runner's matmuls under --dtype bfloat16.
 *
 * Why: a bf16 model's activations need no more than bf16 at a matmul's input
 * (GPUs, vLLM and llama.cpp all feed bf16 there), and AVX512-BF16's
 * vdpbf16ps multiplies 32 bf16 pairs per instruction, twice the float32 FMA
 * rate, with nothing to widen. Float32 FMA caps prefill and batched decode
 * well below what the CPU can do in bf16 (cpu/PERFORMANCE.md).
 *
 * One register-tiled kernel serves every batch size: 1..4 rows (decode)
 * and hundreds (prefill), blocked so that a chunk of activation rows stays
 * in L2 while a task's weight rows pass over it.
 *
 * Without AVX512-BF16 the same numbers come from the float32 kernels run on
 * activations rounded to bf16 (cpu_matmul.c does that); bf16_round_rows
 * serves both.
 */
#ifndef NANOVLLM_CPU_MATMUL_BF16_H
#define NANOVLLM_CPU_MATMUL_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "base/cpu_isa.h"

/* y[m * ldy + n] = sum_k x[m * ldx + k] * w[n * K + k] for m in [0, M) and
 * n in [n0, n1); x and w are bf16, sums in float32. */
typedef void (*Bf16DotKernel)(float *y, int ldy, const uint16_t *x, int ldx, int M,
                              const uint16_t *w, int K, int n0, int n1);

/* The kernel for this SIMD level, or NULL without AVX512-BF16. */
Bf16DotKernel bf16_dot_kernel(CpuIsa isa);

/* dst[i] = src[i] rounded to bf16 (nearest even) for n values. */
void bf16_round_rows(CpuIsa isa, uint16_t *dst, const float *src, size_t n);

/* The same rounding, kept in float32 (for the float32 kernels); dst may be src. */
void bf16_round_in_f32(float *dst, const float *src, size_t n);

#endif
