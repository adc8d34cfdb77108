/*
 * cpu_matmul_quant_x86.h - the x86 levels of quant_gemm (cpu_matmul_quant.h),
 * each in its own file compiled from cpu_matmul_quant_tile.h.
 */
#ifndef NANOVLLM_CPU_MATMUL_QUANT_X86_H
#define NANOVLLM_CPU_MATMUL_QUANT_X86_H

#include "cpu_matmul_quant.h"

#if defined(__x86_64__)
/* quant_gemm with at most tile_rows (1..4; 0: the level's default)
 * activation rows per tile. */
void quant_gemm_avx2(WeightType t, const void *w, int K, const void *xq, int M, float *y, int ldy,
                     int n0, int n1, int tile_rows);
void quant_gemm_avx512(WeightType t, const void *w, int K, const void *xq, int M, float *y, int ldy,
                       int n0, int n1, int tile_rows);
void quant_gemm_avx512vnni(WeightType t, const void *w, int K, const void *xq, int M, float *y,
                           int ldy, int n0, int n1, int tile_rows);
void quant_decode_q8_0_avx2(const void *w, int K, int n0, int n1, float *dst);
void quant_decode_q8_0_avx512(const void *w, int K, int n0, int n1, float *dst);
void quant_act_rows_avx2(QuantActType a, const float *x, int ldx, int M, int K, void *xq);
void quant_act_rows_avx512(QuantActType a, const float *x, int ldx, int M, int K, void *xq);
#endif

#endif
