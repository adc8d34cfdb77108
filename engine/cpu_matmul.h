/*
 * cpu_matmul.h - y = x . W^T for float32 activations and bf16 or f32 weights.
 *
 * Every projection of the CPU forward pass goes through cpu_matmul(). Two
 * strategies, chosen by the number of activation rows M:
 *  - small M (decode): our own SIMD kernels read each weight row once,
 *    widen bf16 to f32 in registers and feed all M rows from it. This is
 *    memory-bound, so reading bf16 (half of f32) is what sets the speed;
 *    no BLAS has a f32 x bf16 kernel.
 *  - large M (prefill): weight rows are widened to f32 in per-thread panels
 *    and multiplied by OpenBLAS sgemm (single-threaded inside each of our
 *    tasks, so only one thread pool runs). The widening is O(N*K) against
 *    O(M*N*K) of arithmetic.
 * The crossover, panel size and measurements are in cpu_matmul.c.
 */
#ifndef NANOVLLM_CPU_MATMUL_H
#define NANOVLLM_CPU_MATMUL_H

#include "cpu_isa.h"
#include "model_weights.h"
#include "thread_pool.h"

typedef struct CpuMatmul CpuMatmul;

/* max_cols: the largest K (W.cols) that will be passed. */
CpuMatmul *cpu_matmul_create(ThreadPool *pool, int max_cols, Error *err);
void cpu_matmul_destroy(CpuMatmul *mm);

/* y[M, w->rows] = x[M, w->cols] . w^T; rows of x and y are contiguous. */
void cpu_matmul(CpuMatmul *mm, float *y, const float *x, int M, const Weight *w);

/* The same product with a forced strategy and SIMD level, for tests and the
 * benchmark: use_blas 0 = own kernels, 1 = widened panels + sgemm. */
void cpu_matmul_with(CpuMatmul *mm, float *y, const float *x, int M, const Weight *w, int use_blas,
                     CpuIsa isa);

#endif
