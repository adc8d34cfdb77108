/*
 * cuda_fp8_gemm.h - prompt-sized products of FP8 matrices on the FP8 tensor
 * cores (sm_90), through cuBLASLt's block-scaled GEMM (cuda_fp8_gemm.cu).
 *
 * Qwen's FP8 checkpoints declare "activation_scheme": "dynamic": the
 * activations are quantized too, per row and 128 columns, when the model
 * runs (what vLLM and SGLang do with them). cuBLAS 12.9+ multiplies such
 * operands on Hopper with W's scales per 128 x 128 tile and the
 * activations' per 1 x 128 block, so a prompt step reads one byte a weight
 * and runs at FP8 tensor-core rates, instead of dequantizing every matrix
 * to bf16 (2 bytes written, 2 read again) before a bf16 GEMM. Decode steps
 * of a few rows keep the weight-only FP8 gemv (exact products).
 */
#ifndef NANOVLLM_CUDA_FP8_GEMM_H
#define NANOVLLM_CUDA_FP8_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CudaFp8Gemm CudaFp8Gemm;

/* cuBLASLt opened on `stream`, buffers for the quantized activations of up
 * to max_rows x max_in, and a check of the whole path (layouts, scales) on
 * a small product against float64 on the host. NULL with why filled when
 * the path is not to be used (not sm_90, no cuBLASLt, no algorithm, the
 * check failed): the caller then dequantizes. err only for CUDA failures
 * and memory, then also NULL. workspace: the caller's, 256-byte aligned. */
CudaFp8Gemm *cuda_fp8_gemm_create(int max_rows, int max_in, void *workspace, size_t workspace_bytes,
                                  CudaStream stream, char *why, size_t why_cap, Error *err);
void cuda_fp8_gemm_destroy(CudaFp8Gemm *g);

/* Whether cuda_fp8_gemm takes this product (W with tile scales, in a
 * multiple of 128, out a multiple of 4, the rows within max_rows). */
bool cuda_fp8_gemm_fits(const CudaFp8Gemm *g, CudaMatrix w, int rows, int out, int in);

/* y [rows, out] float32 = fp8(x) [rows, in] times W [out, in]^T, x's rows
 * quantized per 128 columns first. 0 done; 1 cuBLASLt has no algorithm for
 * this shape (nothing was written: dequantize instead); -1 error. */
int cuda_fp8_gemm(CudaFp8Gemm *g, float *y, const uint16_t *x, CudaMatrix w, int rows, int out, int in,
                  Error *err);

/* The quantization alone (tests): q [rows, cols] e4m3 bytes = x / scale,
 * rounded to nearest even and saturated, scale = max |x| / 448 of each row's
 * 128-column block (1 for an all-zero block), at scales[fp8_act_scale_index].
 * cols a multiple of 128; x 8-byte aligned. */
int cuda_fp8_quantize_rows(uint8_t *q, float *scales, const uint16_t *x, int rows, int cols, CudaStream stream,
                           Error *err);

#ifdef __cplusplus
}
#endif

#endif
