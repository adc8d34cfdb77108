/*
 * cuda_matmul.h - Y = X W^T for the CUDA runner's projections, whatever the
 * matrix's encoding and the batch: the one place that picks the kernel.
 *
 *   bf16 W, 1-4 rows:   cuda_gemv (a streaming read of W)
 *   bf16 W, more rows:  cuBLAS bf16 GEMM, float32 accumulation
 *   FP8 W, 1-16 rows:   cuda_gemv_fp8 in passes of 4 rows (one byte a weight
 *                       per pass; a second pass of a matrix that fits L2 reads
 *                       it from there)
 *   FP8 W, more rows:   on sm_90, when W carries tile scales: the rows
 *                       quantized to FP8 per 128 columns and cuBLASLt's
 *                       block-scaled FP8 GEMM (cuda_fp8_gemm.h); else W
 *                       dequantized to bf16 into a scratch
 *                       (cuda_fp8_dequantize), row tiles of it when it is
 *                       larger, then cuBLAS on each tile
 * NANOVLLM_CUDA_LEGACY=gemv (cuda_variants.h) sends every batch to cuBLAS
 * (FP8: through the scratch); "fp8gemm" keeps the scratch for FP8 prompts. cuBLAS is opened here (cublas_loader.h) with a
 * handle on the caller's stream and a fixed workspace, so nothing is
 * allocated behind the KV cache sizing's back. Callable from C (tests).
 */
#ifndef NANOVLLM_CUDA_MATMUL_H
#define NANOVLLM_CUDA_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows the FP8 few-row path takes (passes of CUDA_GEMV_MAX_ROWS). */
#define CUDA_FP8_GEMV_MAX_ROWS 16

/* The FP8 scratch is at most this many bf16 values (64 MB); larger
 * matrices are dequantized and multiplied in row tiles. */
#define CUDA_FP8_SCRATCH_MAX_ELEMS ((size_t)32 << 20)

typedef struct CudaMatmul CudaMatmul;

/* cuBLAS opened, a handle on `stream` with its workspace; no FP8 scratch. */
CudaMatmul *cuda_matmul_create(CudaStream stream, Error *err);
void cuda_matmul_destroy(CudaMatmul *m);

/* The FP8 scratch, once: `elems` bf16 values (the largest FP8 matrix
 * cuda_matmul will see; capped at CUDA_FP8_SCRATCH_MAX_ELEMS, larger ones
 * go in row tiles). 0 allocates nothing. */
int cuda_matmul_reserve_fp8(CudaMatmul *m, size_t elems, Error *err);

/* The FP8 tensor-core path for products of up to max_rows x max_in (after
 * the weights are up: it checks itself on a small product first, and logs
 * which way FP8 prompt steps go). Not there (not sm_90, no cuBLASLt, a
 * failed check) is not an error: those steps dequantize. */
int cuda_matmul_reserve_fp8_gemm(CudaMatmul *m, int max_rows, int max_in, Error *err);

/* Whether that path is on (it passed its check). */
bool cuda_matmul_fp8_tensor_cores(const CudaMatmul *m);

/* y [rows, out] float32 = x [rows, in] bf16 times W [out, in] transposed,
 * on the stream given at creation. */
int cuda_matmul(CudaMatmul *m, float *y, const uint16_t *x, CudaMatrix w, int rows, int out, int in, Error *err);

#ifdef __cplusplus
}
#endif

#endif
