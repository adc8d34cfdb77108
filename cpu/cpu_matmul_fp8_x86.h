/*
 * cpu_matmul_fp8_x86.h - the x86 levels of fp8_gemm and fp8_decode_rows
 * (cpu_matmul_fp8.h), each in its own file compiled from
 * cpu_matmul_fp8_tile.h.
 */
#ifndef NANOVLLM_CPU_MATMUL_FP8_X86_H
#define NANOVLLM_CPU_MATMUL_FP8_X86_H

#include <stdint.h>

#if defined(__x86_64__)
void fp8_gemm_avx2(const uint8_t *q, const float *scales, int K, const float *x, int ldx, int M,
                   float *y, int ldy, int n0, int n1, float *scratch);
void fp8_gemm_avx512(const uint8_t *q, const float *scales, int K, const float *x, int ldx, int M,
                     float *y, int ldy, int n0, int n1, float *scratch);
void fp8_decode_avx2(const uint8_t *q, const float *scales, int K, int n0, int n1, float *dst);
void fp8_decode_avx512(const uint8_t *q, const float *scales, int K, int n0, int n1, float *dst);
#endif

#endif
