/*
 * cpu_matmul_quant_avx2.c - the quantized-weight tile kernels
 * (cpu_matmul_quant_tile.h) compiled for AVX2 + FMA. Tiles of 4 weight rows
 * x 4 activation rows: one thread, 64 x 256 x 1024 in cache, GFLOP/s at
 * 1..8 activation rows per tile (tiles up to 8 built for the test):
 *   q4_k 70 92 104 110 113 106 95 86
 *   q5_k 54 81  95 101 104  91 87 80
 *   q6_k 58 85  93 103 100  88 84 85
 *   q8_0 51 59  63  63  63  62 61 61
 * 5 wins by 3% on q4_k/q5_k but leaves remainders in batches of 4, 8, 16.
 */
#include "cpu_matmul_quant_x86.h"

#if defined(__x86_64__)
#define QT "avx2,fma"
#define QMR 4
#define QGEMM quant_gemm_avx2
#define QQUANT quant_act_rows_avx2
#define QDECODE quant_decode_q8_0_avx2
#include "cpu_matmul_quant_tile.h"
#endif
