/*
 * cpu_matmul_quant_avx2.c - the quantized-weight tile kernels
 * (cpu_matmul_quant_tile.h) compiled for AVX2 + FMA. Tiles of 4 weight rows
 * x 4 activation rows: 16 int32 accumulators are all of AVX2's registers,
 * so some live on the stack, yet this measured fastest (one thread, 64 x
 * 256 x 1024 in cache, GFLOP/s at 1/2/3/4 rows per tile: q4_k 71/92/94/94,
 * q5_k 54/72/81/89, q6_k 54/65/76/83, q8_0 52/59/61/62).
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
