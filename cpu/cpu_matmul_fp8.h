/*
 * cpu_matmul_fp8.h - y = x . W^T for FP8 weights (Qwen's float8_e4m3fn
 * checkpoints, model/weight_format.h) on the CPU, read at one byte a weight.
 *
 * Weight-only: the activations stay float32 (FP8 is not GGUF's integer
 * path, cpu_matmul_quant.h). A byte b becomes the IEEE half
 * ((b & 0x80) << 8) | ((b & 0x7f) << 7), which is exactly e4m3(b) * 2^-8,
 * subnormals and signed zeros included (e4m3's 4-bit exponent with bias 7
 * sits in the half's 5-bit field with bias 15, the mantissa bits line up),
 * and vcvtph2ps (F16C) widens 8 or 16 halves at a time; the 2^8 goes into
 * the scale. fp8_decode_rows multiplies each value by its 128 x 128 tile's
 * scale times 2^8: the product e4m3 * scale rounded once, bit for bit what
 * fp8_dequantize_rows writes (exact while |scale| < 2^120; checkpoints'
 * scales are about max|w| / 448).
 *
 * fp8_gemm is a register-tiled small-batch GEMM (as cpu_matmul_small.h)
 * that reads each weight byte from memory once per call: for one to four
 * activation rows it widens a strip of weight rows in registers and
 * multiplies at once; for more it widens a strip into the caller's scratch
 * and runs tiles of activation rows over it from cache. It sums x * e4m3 *
 * 2^-8 per 128-column chunk and multiplies each chunk's sum by the tile's
 * scale (a multiply per chunk instead of per weight), in the same order on
 * every path: a row's result does not depend on how many rows its batch
 * has, nor on how the weight rows are split into tasks. cpu_matmul.c runs
 * it for decode batches ("gemm") and fp8_decode_rows' panels through
 * OpenBLAS for prefills ("blas").
 *
 * What sets the speed: on Zen 3 (AVX2) the widening, not memory. vcvtph2ps
 * converts about 4 values a cycle there, so one thread multiplies ~12 G
 * weights/s from cache at one activation row (bf16's kernels 16-20 G),
 * while memory delivers 12-17 GB/s per thread with both threads reading: FP8
 * decode is compute-bound at 1 row and beats bf16 by what the halved bytes
 * buy below that limit (cpu/PERFORMANCE_FP8.md has the measurements, and the
 * exact integer-only and table-lookup widenings that were no faster).
 *
 * Levels: scalar (portable, plain C: fp8_dequantize_rows' values summed in
 * k order, the reference the tests compare the others with), AVX2 + FMA +
 * F16C (8 lanes) and AVX-512 (16 lanes, 32 registers). With bf16 inputs
 * (--dtype bfloat16) and AVX512-BF16 + VBMI, fp8_gemm_bf16 below instead:
 * on Zen 4 it reads FP8 at about bf16's GB/s at one row and runs prefill at
 * 1.7x fp8_gemm. NaN bytes (0x7f, 0xff; a checkpoint holding one is
 * refused at load) are not decoded as NaN by the SIMD levels.
 */
#ifndef NANOVLLM_CPU_MATMUL_FP8_H
#define NANOVLLM_CPU_MATMUL_FP8_H

#include <stdbool.h>
#include <stdint.h>

#include "base/cpu_isa.h"
#include "model/weight_format.h"

/* Floats of scratch fp8_gemm uses: FP8_SCRATCH_ROWS rows of K. */
#define FP8_SCRATCH_ROWS 4

/* y[m * ldy + n] = sum_k x[m * ldx + k] * W[n, k] for m in [0, M), n in
 * [n0, n1): W is the FP8 matrix q (rows of K bytes) with its block scales
 * (fp8_scale_count of them for the whole matrix). Any M, K and n range.
 * scratch: FP8_SCRATCH_ROWS x K floats of the caller's (a thread's own),
 * where more than 4 activation rows widen strips of weight rows; NULL
 * runs them 4 at a time instead (the same results, slower). */
void fp8_gemm(CpuIsa isa, const uint8_t *q, const float *scales, int K, const float *x, int ldx,
              int M, float *y, int ldy, int n0, int n1, float *scratch);

/* Rows [n0, n1) of the FP8 matrix decoded to float32 at dst, K per row:
 * fp8_dequantize_rows' values bit for bit (NaN bytes aside, see above). */
void fp8_decode_rows(CpuIsa isa, const uint8_t *q, const float *scales, int K, int n0, int n1,
                     float *dst);

/* Whether the SIMD kernels run at this level (AVX2 and up, with F16C);
 * the scalar kernel otherwise. */
bool fp8_simd(CpuIsa isa);

/* FP8 weights against bf16 activations (cpu_matmul_fp8_bf16.c): where the
 * CPU has AVX512-BF16 and AVX512-VBMI, e4m3 widened exactly to bf16 and
 * multiplied by vdpbf16ps, summed per 128-column chunk as fp8_gemm does
 * (exact products, float32 sums; other bits than fp8_gemm's, as its lanes
 * pair the products differently). fp8_bf16_kernel says whether this level
 * has it; the two calls return false (doing nothing) where it has not.
 * fp8_gemm_bf16 is fp8_gemm with x as bf16 (M rows of ldx) and the same
 * scratch (FP8_SCRATCH_ROWS x K floats, or NULL: slower, the same bits).
 * fp8_widen_bf16 writes rows [n0, n1) as bf16 e4m3 values (no scale), K
 * per row: each byte's float value exactly. */
bool fp8_bf16_kernel(CpuIsa isa);
bool fp8_gemm_bf16(CpuIsa isa, const uint8_t *q, const float *scales, int K, const uint16_t *x, int ldx,
                   int M, float *y, int ldy, int n0, int n1, float *scratch);
bool fp8_widen_bf16(CpuIsa isa, const uint8_t *q, int K, int n0, int n1, uint16_t *dst);

#endif
