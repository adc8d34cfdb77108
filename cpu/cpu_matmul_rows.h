/*
 * cpu_matmul_rows.h - the row kernels (cpu_matmul_rows.c) and the bf16
 * widening of weight panels, for cpu_matmul.c's drivers.
 */
#ifndef NANOVLLM_CPU_MATMUL_ROWS_H
#define NANOVLLM_CPU_MATMUL_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "base/cpu_isa.h"
#include "model/weight_format.h"

/* y[m, n] = x[m, :] . w[n, :] for m < M (at most 4), n in [n0, n1); w is K
 * wide, bf16 or f32. */
typedef void (*RowsKernel)(float *y, int ldy, const float *x, int ldx, int M, const void *w, int K,
                           int n0, int n1);

RowsKernel rows_kernel(CpuIsa isa, WeightType type);

/* n bf16 values to float32. */
void widen_bf16_rows(CpuIsa isa, float *dst, const uint16_t *src, size_t n);

#endif
