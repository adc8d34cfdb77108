/*
 * cpu_matmul_quant_avx512vnni.c - the quantized-weight tile kernels
 * (cpu_matmul_quant_tile.h) compiled for AVX-512 with AVX512-VNNI, the
 * CPU_ISA_AVX512_BF16 level and above (Zen 4, Cooper Lake and later Intel
 * have both). Q8_0's kernels sum each group of four u8 x s8 products into
 * int32 with one vpdpbusd (Q_VNNI) where the other levels pair vpmaddubsw
 * with vpmaddwd by ones: the same integers, bit for bit (vpmaddubsw never
 * saturates on these operands: |w| <= 128, |x| <= 127), so every result
 * equals the AVX2 level's. The K types' tiles are the AVX-512 level's. Not
 * yet run on a machine with VNNI (the development host exposes AVX2 only):
 * the test suite checks it against the scalar level wherever CI has it.
 * Only quant_gemm comes from this file; quantizing and decoding use the
 * AVX-512 level's functions.
 */
#include "cpu_matmul_quant_x86.h"

#if defined(__x86_64__)
#define QT "avx512f,avx512bw,avx512vl,avx512vnni,fma"
#define QMR 4
#define Q_VNNI 1
#define Q_GEMM_ONLY 1
#define QGEMM quant_gemm_avx512vnni
#include "cpu_matmul_quant_tile.h"
#endif
