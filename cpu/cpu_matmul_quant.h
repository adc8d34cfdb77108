/*
 * cpu_matmul_quant.h - y = x . W^T for block-quantized weights (GGUF's Q8_0,
 * Q4_K, Q5_K, Q6_K; model/weight_format.h) on the CPU, in integers.
 *
 * As llama.cpp does, the activations are first quantized to 8 bits per block
 * (Q8_0 blocks of 32 for Q8_0 weights, Q8_K blocks of 256 for the K types),
 * once per call; then every weight block times activation block is an
 * integer dot product (u8 x s8 pairs summed in int16, then int32 with the
 * sub-block scale), scaled to float once per block. Unlike llama.cpp's CPU
 * path, which unpacks a weight block again for every activation row, these
 * kernels unpack a strip of 4 weight rows once per 32 values and apply it to
 * a tile of up to 4 activation rows, so a decode batch or a prefill reads
 * and unpacks each weight once per tile of rows instead of once per row;
 * Q8_0 from 16 rows packs 8 weight rows side by side first
 * (cpu_matmul_quant_q8_0.h). Every batch size takes these kernels, prefill
 * included, and a row's result does not depend on the batch size.
 *
 * Levels: scalar (portable, the reference every SIMD level is tested
 * against), AVX2, AVX-512 (the same 256-bit kernels compiled with EVEX:
 * 32 registers) and, from CPU_ISA_AVX512_BF16, AVX512-VNNI (Q8_0's
 * products by vpdpbusd; the K types as AVX-512). No AMX-INT8 kernel.
 */
#ifndef NANOVLLM_CPU_MATMUL_QUANT_H
#define NANOVLLM_CPU_MATMUL_QUANT_H

#include <stddef.h>

#include "thread_pool.h"
#include "base/cpu_isa.h"
#include "model/weight_format.h"

/* The block type the activations of a product with this weight type are
 * quantized to: WEIGHT_Q8_0 for Q8_0 weights, Q8_K (as BlockQ8K) for the K
 * types. Two weight types may share one quantized input when this agrees. */
typedef enum QuantActType { QUANT_ACT_Q8_0, QUANT_ACT_Q8_K } QuantActType;

QuantActType quant_act_type(WeightType t);

/* Bytes of one quantized activation row of K values (0 when K is not a
 * whole number of blocks). */
size_t quant_act_row_bytes(QuantActType a, int K);

/* Quantizes M rows of K floats (row m at x + m * ldx) to M rows of
 * quant_act_row_bytes(a, K) bytes each at xq: byte for byte what
 * quantize_row_q8_k / quantize_row_q8_0 write, at any SIMD level. */
void quant_act_rows(CpuIsa isa, QuantActType a, const float *x, int ldx, int M, int K, void *xq);

/* The same for M contiguous rows, split across the pool when there are
 * more than 16 (the caller's thread alone otherwise: decode's few rows
 * are not worth a wake-up). */
void quant_act_rows_pool(ThreadPool *pool, CpuIsa isa, QuantActType a, const float *x, int M, int K,
                         void *xq);

/* y[m * ldy + n] = W[n, :] . X[m, :] for n in [n0, n1), m in [0, M): W has
 * K columns of type t (row n at w + n * weight_row_bytes(t, K)), X is M rows
 * quantized by quant_act_rows(quant_act_type(t)). The integer sums are
 * exact at every level; levels differ only in the order of the float sums
 * over blocks. */
void quant_gemm(CpuIsa isa, WeightType t, const void *w, int K, const void *xq, int M, float *y,
                int ldy, int n0, int n1);

/* The same with at most tile_rows (1..4) activation rows per register tile
 * instead of the level's own choice (4 at every x86 level): tests run
 * every tile on any x86 machine, benchmarks compare them. Ignored by the
 * scalar level. */
void quant_gemm_tiles(CpuIsa isa, int tile_rows, WeightType t, const void *w, int K, const void *xq,
                      int M, float *y, int ldy, int n0, int n1);

/* Rows [n0, n1) of a quantized matrix (K columns of type t) decoded to
 * float32 at dst, K per row: weight_dequantize_row's values (Q8_0 in SIMD,
 * the K types by the reference decoder), for the float paths of
 * cpu_matmul. */
void quant_decode_rows(CpuIsa isa, WeightType t, const void *w, int K, int n0, int n1, float *dst);

#endif
