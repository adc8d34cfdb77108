/*
 * cpu_matmul_small.h - register-tiled GEMM for a decode batch (cpu_matmul.h's
 * "gemm" strategy): y = x . W^T for about 2..64 activation rows against bf16
 * or f32 weights.
 *
 * Why a separate kernel: the row kernels (one weight row per pass, up to four
 * activation rows sharing each load) re-read every weight row M/4 times and
 * do only 4 FMAs per load, and OpenBLAS needs the bf16 weights widened to f32
 * in memory first (one extra write and read of every weight per step). This
 * kernel widens a strip of weight rows in registers once per step and applies
 * it to a tile of activation rows whose accumulators stay live, so each weight
 * is read from memory once per step and each load feeds several FMAs.
 */
#ifndef NANOVLLM_CPU_MATMUL_SMALL_H
#define NANOVLLM_CPU_MATMUL_SMALL_H

#include "base/cpu_isa.h"
#include "model/model_weights.h"

/* y[m * ldy + n] = sum_k x[m * ldx + k] * w[n * K + k] for m in [0, M),
 * n in [n0, n1): the same contract as the row kernels of cpu_matmul.c. */
typedef void (*SmallGemmKernel)(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                                int K, int n0, int n1);

/* The kernel for this SIMD level and weight type, or NULL where there is none
 * (scalar level, other architectures): the caller then uses its row kernels. */
SmallGemmKernel small_gemm_kernel(CpuIsa isa, WeightType type);

#endif
