/*
 * cpu_matmul.h - y = x . W^T for float32 activations and bf16, f32, FP8 or
 * block-quantized weights.
 *
 * Every projection of the CPU forward pass goes through here. Four
 * strategies, chosen by the number of activation rows M and the CPU:
 *  - rows (M = 1, single-stream decode): our own SIMD kernels stream each
 *    weight row once, widening bf16 to f32 in registers, for up to four
 *    activation rows per pass. Memory-bound, so reading bf16 (half of f32)
 *    is what sets the speed; no BLAS has a f32 x bf16 kernel.
 *  - gemm (a decode batch, ~2..64 rows): a register-tiled kernel that reads
 *    each weight once per step for all rows (cpu_matmul_small.h).
 *  - amx (larger M, where the CPU has AMX): tile multiplies on bf16 terms
 *    that add up exactly to the float32 activations (cpu_matmul_amx.h).
 *  - blas (larger M elsewhere): weight rows widened to f32 in per-thread
 *    panels and multiplied by OpenBLAS sgemm, single-threaded inside each of
 *    our tasks so that only one thread pool runs.
 * All four compute in float32; they differ only in summation order.
 *
 * Block-quantized weights (GGUF's Q8_0, Q4_K, Q5_K, Q6_K) take a fifth,
 * "quant" (cpu_matmul_quant.h): the input is quantized to 8 bits per block
 * once per call (shared by all the weights of a multi call) and multiplied
 * in integers by register-tiled kernels. The K types do so at every M;
 * Q8_0 weights from 64 rows on are decoded to float32 panels for OpenBLAS
 * instead ("blas", measured faster there: cpu_matmul.c). A forced blas or
 * gemm (the small-batch GEMM's f32 kernel on decoded panels) decodes any
 * quantized weight so; forced rows or amx run as quant, and bf16
 * inputs do not (8-bit activations are coarser than bf16 already). A list
 * may mix quantized and plain weights.
 *
 * FP8 weights (Qwen's float8_e4m3fn checkpoints with 128 x 128 block
 * scales; cpu_matmul_fp8.h) multiply float32 activations, read at one byte
 * a weight: fp8_gemm widens them in registers for decode batches ("gemm",
 * at every SIMD level), and prefills decode 128-row panels to float32 for
 * OpenBLAS ("blas"; cpu_matmul.c says where the two meet). A forced blas
 * runs the panels; every other forced strategy (rows, gemm, amx, quant)
 * runs fp8_gemm. bf16 inputs apply as to bf16 weights (rounded, then the
 * float32 path), and a list may mix FP8 weights with any others.
 *
 * With bf16 inputs (--dtype bfloat16) every activation is first rounded to
 * bf16; where the CPU has AVX512-BF16 one more kernel multiplies bf16 pairs
 * directly for every M (cpu_matmul_bf16.h) except where AMX would run,
 * elsewhere the four above run on the rounded values. cpu_matmul_grouped does not round (its MoE caller
 * writes its inputs already rounded) and has no bf16 kernel yet.
 */
#ifndef NANOVLLM_CPU_MATMUL_H
#define NANOVLLM_CPU_MATMUL_H

#include <stdbool.h>

#include "thread_pool.h"
#include "base/cpu_isa.h"
#include "model/model_weights.h"

typedef struct CpuMatmul CpuMatmul;

typedef enum MatmulStrategy {
    MATMUL_AUTO,
    MATMUL_ROWS,
    MATMUL_BLAS,
    MATMUL_AMX,
    MATMUL_GEMM,
    MATMUL_QUANT /* block-quantized weights (cpu_matmul_quant.h); their only strategy */
} MatmulStrategy;

/* max_rows: the largest M; max_cols: the largest K (W.cols) that will be passed. */
CpuMatmul *cpu_matmul_create(ThreadPool *pool, int max_rows, int max_cols, Error *err);
void cpu_matmul_destroy(CpuMatmul *mm);

/* Round every input to bf16 from now on (false: float32 inputs, the default). */
void cpu_matmul_set_bf16_inputs(CpuMatmul *mm, bool on);
bool cpu_matmul_bf16_inputs(const CpuMatmul *mm);

/* y[M, w->rows] = x[M, w->cols] . w^T; rows of x and y are contiguous. */
void cpu_matmul(CpuMatmul *mm, float *y, const float *x, int M, const Weight *w);

/* ys[i] = x . ws[i]^T for `count` weights of the same width sharing one
 * input (q/k/v, gate/up): one pass of preparation and one parallel loop. */
void cpu_matmul_multi(CpuMatmul *mm, const float *x, int M, const Weight *const *ws,
                      float *const *ys, int count);

/* One product of cpu_matmul_grouped: y[M, w->rows] = x[M, w->cols] . w^T.
 * xb, when set, is x as bf16 (the caller rounded it): with a bf16 weight on
 * a CPU with bf16 dot products the product then runs on cpu_matmul_bf16's
 * kernel and x is not read (it may be NULL where the caller knows that:
 * bf16_dot_kernel(cpu_isa_active()) set); elsewhere on x, which must then
 * hold the same values. */
typedef struct MatmulGroup {
    const float *x;
    int M;
    const Weight *w;
    float *y;
    const uint16_t *xb;
} MatmulGroup;

/* Every product of the list, each with its own input (a MoE layer's
 * experts): those few enough rows for the row kernels or the small-batch
 * GEMM, and every one on the bf16 dot kernel (xb), share one parallel loop
 * (one wake-up of the pool for all of them); the others run as
 * cpu_matmul_multi, consecutive ones sharing an input together. */
void cpu_matmul_grouped(CpuMatmul *mm, const MatmulGroup *groups, int count);

/* The same with a forced strategy and SIMD level (tests, benchmarks). A
 * strategy the CPU or the weight cannot use falls back to MATMUL_ROWS (gemm
 * at the scalar level runs the row kernels). */
void cpu_matmul_with(CpuMatmul *mm, float *y, const float *x, int M, const Weight *w,
                     MatmulStrategy strategy, CpuIsa isa);

/* The strategy MATMUL_AUTO picks for these arguments. */
MatmulStrategy cpu_matmul_choose(int M, const Weight *w, CpuIsa isa);

const char *matmul_strategy_name(MatmulStrategy s);

/* The kernel family OpenBLAS chose for this CPU ("Haswell", "Cooperlake",
 * ...). NANOVLLM_CPU_ISA does not reach it: OpenBLAS picks at load time,
 * and only OPENBLAS_CORETYPE (read before main) overrides it. */
const char *cpu_matmul_blas_core(void);

#endif
