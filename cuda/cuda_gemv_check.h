/*
 * cuda_gemv_check.h - the normalising gemvs and the experts' gate/up with
 * SiLU x up against the separate launches they replace, byte for byte, on
 * random data (cuda_gemv_check.cu): the CUDA runner checks a few shapes at
 * start-up, the GPU tests many.
 */
#ifndef NANOVLLM_CUDA_GEMV_CHECK_H
#define NANOVLLM_CUDA_GEMV_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* rows x in inputs, out outputs (glu: the activation's width, W twice
 * that); delta: a pending residual update; fp8: W as e4m3 with per-row
 * scales. */
typedef struct CudaGemvNormCase {
    int rows, out, in;
    bool delta, glu, fp8;
} CudaGemvNormCase;

/* 0: the fused launch wrote the separate launches' bytes (product or
 * activation, h, the new residual); 1: it did not, or does not take the
 * shape (why says where); -1: a CUDA error or no memory (err). */
int cuda_gemv_norm_check(CudaGemvNormCase c, uint64_t seed, CudaStream stream, char *why, size_t why_cap, Error *err);

/* An MoE step's gate/up over routed pairs (random experts of `experts`,
 * x_div pairs a token's row, out the activation's width): the same result
 * codes for cuda_gemv_experts_glu against cuda_gemv_experts then
 * cuda_silu_mul_rows. */
typedef struct CudaGemvExpertsCase {
    int experts, pairs, x_div, out, in;
    bool fp8;
} CudaGemvExpertsCase;
int cuda_gemv_experts_glu_check(CudaGemvExpertsCase c, uint64_t seed, CudaStream stream, char *why, size_t why_cap,
                                Error *err);

#ifdef __cplusplus
}
#endif

#endif
