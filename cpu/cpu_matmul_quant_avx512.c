/*
 * cpu_matmul_quant_avx512.c - the quantized-weight tile kernels
 * (cpu_matmul_quant_tile.h) compiled for AVX-512: the same 256-bit
 * instructions, but EVEX encoding gives 32 ymm registers (fewer spills:
 * 52 stack accesses in the 4-row q4_k tile). Not yet measured on an
 * AVX-512 machine, so the tile height stays AVX2's; its 1..4-row tiles are
 * tested through the AVX2 build of the same template.
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
