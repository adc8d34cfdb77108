/*
 * cpu_matmul_quant_avx2.c - the quantized-weight tile kernels
 * (cpu_matmul_quant_tile.h) compiled for AVX2 + FMA: 16 ymm registers hold
 * 4 weight rows x 2 activation rows of int32 accumulators.
 */
#include "cpu_matmul_quant_x86.h"

#if defined(__x86_64__)
#define QT "avx2,fma"
#define QMR 2
#define QGEMM quant_gemm_avx2
#define QQUANT quant_act_rows_avx2
#include "cpu_matmul_quant_tile.h"
#endif
