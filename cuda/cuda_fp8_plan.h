/*
 * cuda_fp8_plan.h - the arithmetic of FP8 weights on the GPU, in plain C for
 * the kernels (cuda_fp8.cu, cuda_moe.cu), the upload (cuda_weights.cu) and a
 * CPU test (tests/test_fp8_plan.c).
 *
 * Scales per row. A checkpoint gives one float32 scale per 128 x 128 tile
 * (model/weight_format.h). The runner stacks matrices that read the same
 * input (q/k/v, gate/up, every expert of a layer) into one, and their row
 * counts need not be multiples of 128 (the tiny test models have 96-row
 * parts; k_proj of a 3-KV-head model is 192 rows): a part's tile rows would
 * then straddle the stacked matrix's tile rows, and no per-tile layout of
 * the stack is right. So on the device every row keeps its own copy of its
 * tile row's scales, rows x ceil(cols / 128) floats: stacking is then plain
 * concatenation, a kernel finds W[n, k]'s scale at n * tiles + k / 128 with
 * no knowledge of the parts, and it costs 4 bytes per 128 weights (3% of the
 * FP8 bytes; 0.9 GB next to Qwen3-30B-A3B's 29 GB of experts).
 *
 * e4m3 -> f16 without the hardware conversion (sm_80 has none; sm_89 and
 * sm_90 have cvt.rn.f16x2.e4m3x2): e4m3 is sign, 4 exponent bits biased by
 * 7, 3 mantissa bits; f16 is sign, 5 exponent bits biased by 15, 10 mantissa
 * bits. Moving the byte's low 7 bits up by 7 places e4m3's exponent field in
 * the low 4 bits of f16's and its mantissa in the top 3 of f16's: the f16
 * then reads as e4m3 * 2^(7 - 15) = e4m3 * 2^-8, exactly, subnormals too
 * (both formats' subnormals have the exponent field 0, and e4m3's smallest,
 * 2^-9, lands on 2^-17, inside f16's range). The kernels fold the 2^8 into
 * the scale. Two bytes at a time: one byte permute puts them in the high
 * byte of each 16-bit half, then a shift and a mask.
 */
#ifndef NANOVLLM_CUDA_FP8_PLAN_H
#define NANOVLLM_CUDA_FP8_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "model/weight_format.h"
#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#define FP8_PLAN_FN __host__ __device__ static inline
#else
#define FP8_PLAN_FN static inline
#endif

/* Column tiles of a row of `cols` values: ceil(cols / 128). */
FP8_PLAN_FN int fp8_col_tiles(int cols) { return (cols + FP8_BLOCK - 1) / FP8_BLOCK; }

/* Where W[n, k]'s scale is in the device's per-row layout. */
FP8_PLAN_FN size_t fp8_row_scale_index(int n, int k, int cols) {
    return (size_t)n * (size_t)fp8_col_tiles(cols) + (size_t)(k / FP8_BLOCK);
}

/* Floats of a rows x cols matrix's per-row scales. */
FP8_PLAN_FN size_t fp8_row_scale_count(int rows, int cols) { return (size_t)rows * (size_t)fp8_col_tiles(cols); }

/* The per-row scales of a rows x cols FP8 matrix from its checkpoint's
 * per-tile ones (fp8_scale_count of them, row-major by 128-row tile): row
 * n's tile t is tile_scales[(n / 128) * tiles + t]. A part of a stacked
 * matrix writes at dst + fp8_row_scale_count(rows above it, cols). */
static inline void fp8_row_scales(float *dst, const float *tile_scales, int rows, int cols) {
    const int tiles = fp8_col_tiles(cols);
    for (int n = 0; n < rows; n++)
        for (int t = 0; t < tiles; t++) dst[(size_t)n * tiles + t] = tile_scales[(size_t)(n / FP8_BLOCK) * tiles + t];
}

/* The layouts of cuBLASLt's block-scaled FP8 GEMM (cuda_fp8_gemm.cu, for
 * prompt steps on sm_90): W's scales one per 128 x 128 tile, row-major by
 * 128-row tile, each tile row padded to a multiple of 4 floats; the
 * activations' one per row and 128 columns, 128-column block after block
 * with a block's rows contiguous (as PyTorch's scaled_mm passes them). */
FP8_PLAN_FN int fp8_tile_scale_ld(int cols) { return (fp8_col_tiles(cols) + 3) / 4 * 4; }
FP8_PLAN_FN size_t fp8_tile_scale_count(int rows, int cols) {
    return (size_t)fp8_col_tiles(rows) * (size_t)fp8_tile_scale_ld(cols);
}
FP8_PLAN_FN size_t fp8_act_scale_index(int row, int k, int rows) {
    return (size_t)(k / FP8_BLOCK) * (size_t)rows + (size_t)row;
}

/* A part of rows x cols (its checkpoint's tile scales, fp8_scale_count of
 * them) into a stack's padded tile scales at dst + fp8_tile_scale_count(rows
 * above it, cols); the padding is 0. Only for parts whose rows are a
 * multiple of 128, so that the stack's tiles are the parts' tiles. */
static inline void fp8_padded_tile_scales(float *dst, const float *tile_scales, int rows, int cols) {
    const int tiles = fp8_col_tiles(cols), ld = fp8_tile_scale_ld(cols);
    for (int r = 0; r < fp8_col_tiles(rows); r++)
        for (int t = 0; t < ld; t++) dst[(size_t)r * ld + t] = t < tiles ? tile_scales[(size_t)r * tiles + t] : 0.0f;
}

/* __byte_perm selectors: bytes 0 and 1 (LO) or 2 and 3 (HI) of a word into
 * the high byte of each 16-bit half, zeros below them. */
#define FP8_PRMT_LO 0x1404u
#define FP8_PRMT_HI 0x3424u

/* The f16x2 bits of e4m3 * 2^-8 for the two bytes of a word that sit in
 * the high byte of each half (x as FP8_PRMT_* leaves it). */
FP8_PLAN_FN uint32_t fp8x2_high_bytes_to_f16x2(uint32_t x) {
    return (x & 0x80008000u) | ((x >> 1) & 0x3f803f80u);
}

/* The same from the two low bytes of w (byte 0 into the low half), the
 * portable form of the permute. */
FP8_PLAN_FN uint32_t fp8x2_to_f16x2_scaled(uint32_t w) {
    return fp8x2_high_bytes_to_f16x2(((w & 0xffu) << 8) | ((w & 0xff00u) << 16));
}

/* 2^8: what the bit conversion's values are to be multiplied by. */
#define FP8_F16_UNSCALE 256.0f

/* Rows of W dequantized to bf16 at a time for cuBLAS: what a scratch of
 * scratch_elems values holds, in multiples of 128 when it holds that many
 * (cuBLAS's tiles), never fewer than one row, never more than rows. */
FP8_PLAN_FN int fp8_dequant_tile_rows(size_t scratch_elems, int rows, int cols) {
    size_t fit = cols > 0 ? scratch_elems / (size_t)cols : 0;
    if (fit >= (size_t)rows) return rows;
    if (fit >= 128) fit = fit / 128 * 128;
    return fit < 1 ? 1 : (int)fit;
}

/* Warps that share one output's K in the FP8 gemv (cuda_fp8.cu): the bf16
 * gemv's rule (four below 4,096 outputs), but a warp's load covers 512
 * values here, so fewer when K has fewer 512-value chunks. */
FP8_PLAN_FN int fp8_gemv_k_split(int out, int in) {
    if (out >= 4096) return 1;
    return in >= 2048 ? 4 : in >= 1024 ? 2 : 1;
}

#endif
