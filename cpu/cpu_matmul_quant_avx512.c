/*
 * cpu_matmul_quant_avx512.c - the quantized-weight tile kernels
 * (cpu_matmul_quant_tile.h) compiled for AVX-512: the same 256-bit
 * instructions, but EVEX encoding gives 32 ymm registers, enough for
 * 4 weight rows x 4 activation rows of int32 accumulators.
 */
#include "cpu_matmul_quant_x86.h"

#if defined(__x86_64__)
#define QT "avx512f,avx512bw,avx512vl,fma"
#define QMR 4
#define QGEMM quant_gemm_avx512
#define QQUANT quant_act_rows_avx512
#define QDECODE quant_decode_q8_0_avx512
#include "cpu_matmul_quant_tile.h"
#endif
