/*
 * cpu_matmul_amx.h - prefill matmuls on Intel AMX tiles, exact to float32.
 *
 * AMX multiplies bf16 x bf16 into float32 at ~16x the rate of AVX-512 FMAs,
 * but our activations are float32. Every float32 x splits exactly into three
 * bf16 terms (x = hi + mid + lo, 8 significant bits each), and a bf16 x bf16
 * product is exact in float32, so W.x = W.hi + W.mid + W.lo computed on
 * tiles is float32 arithmetic at about five times the AVX-512 rate.
 *
 * The product is computed transposed, y^T = W . x^T, so that 16x32 tiles of
 * the weights load straight from the checkpoint mapping (rows of W are rows
 * of a tile) and only the activations are rearranged: amx_pack() writes them
 * once per matmul input, in the pair-interleaved layout tiles need, and every
 * weight sharing that input (q/k/v, gate/up) reuses the packing.
 */
#ifndef NANOVLLM_CPU_MATMUL_AMX_H
#define NANOVLLM_CPU_MATMUL_AMX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model_weights.h"

/* Shapes the tile kernel handles: bf16 weights, rows % 16 == 0, cols % 32 == 0. */
bool amx_supports(const Weight *w);

/* Tokens per packed group (the tile width). */
#define AMX_GROUP 16

/* uint16 elements of the packing of M rows of K values. */
size_t amx_packed_elems(int M, int K);

/* Packs rows [16 * group, 16 * group + 16) of x [M, K] (zeros past M). */
void amx_pack_group(uint16_t *packed, const float *x, int M, int K, int group);

/* y[m, n] = sum_k x[m, k] w[n, k] for tokens m in [m0, m1) and weight rows
 * n in [n0, n1), from the packing of x [M, K]. m0 is a multiple of 16; n0
 * and n1 multiples of 16. ldy: floats per row of y. */
void amx_matmul(float *y, int ldy, const uint16_t *packed, int M, int m0, int m1, const Weight *w,
                int n0, int n1);

#endif
