/*
 * cpu_ops.h - the small per-token operations of the Qwen3 forward pass.
 *
 * Each works on one row (a token's vector) or a range of rows, so the CPU
 * runner can hand row ranges to its thread pool. float32 throughout; the
 * formulas are those of Hugging Face's Qwen3 (and scripts/qwen3_ref.py).
 * The ones that run over whole activations or attention scores (norms,
 * SiLU, softmax) have AVX-512 and AVX2 versions chosen at run time (cpu_isa.h); the
 * exponential there is a Cephes-style polynomial accurate to ~1 ulp.
 */
#ifndef NANOVLLM_CPU_OPS_H
#define NANOVLLM_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "model/model_weights.h"

/* out = x / sqrt(mean(x^2) + eps) * w over n values; out may alias x. */
void rmsnorm(float *out, const float *x, const float *w, int n, float eps);

/* x += delta, then out = rmsnorm(x): the residual add fused with the next norm. */
void add_rmsnorm(float *x, const float *delta, float *out, const float *w, int n, float eps);

/* inv_freq[i] = theta^(-2i / head_dim) for i < head_dim / 2 (double, as HF). */
void rope_inv_freq(double *inv_freq, int head_dim, double theta);

/* cos_sin[2i], cos_sin[2i+1] = cos, sin of pos * inv_freq[i]. */
void rope_cos_sin(float *cos_sin, int pos, const double *inv_freq, int half_dim);

/* NeoX rotation of one head vector: halves (x1, x2) -> (x1 c - x2 s, x2 c + x1 s). */
void rope_apply(float *head, int head_dim, const float *cos_sin);

/* gate[i] = silu(gate[i]) * up[i]. */
void silu_mul(float *gate, const float *up, size_t n);

/* x[i] = exp(x[i] - shift) for i < n; returns the sum of the new values. */
float exp_shifted_sum(float *x, int n, float shift);

/* Index of the largest value; the lowest index among equals (as numpy's argmax). */
int argmax(const float *x, int n);

/* out[hidden] = float32 copy of row `id` of the embedding matrix. */
void embed_row(float *out, const Weight *embed, int id);

#endif
