/*
 * cpu_gated_deltanet.h - the token mixer of Qwen3.5's linear-attention
 * layers (Gated DeltaNet) on the CPU, between the projections.
 *
 * The runner does the matmuls (in_proj_qkv, in_proj_z, in_proj_a,
 * in_proj_b before; out_proj after) and owns the per-sequence states; this
 * module takes the projected rows of a step's tokens and writes the rows
 * out_proj reads: the causal depthwise conv + SiLU over a rolling conv
 * state, L2-normalised q and k, the gated delta rule over each value head's
 * [dk, dv] state, and the gated RMSNorm. The equations are Hugging Face's
 * (modeling_qwen3_5.py); per token t and value head (sharing key head
 * j / (Hv/Hk)):
 *
 *   conv[t][c] = silu(sum_j W[c][j] * mixed[t-(K-1)+j][c]); split q, k, v
 *   q = q / sqrt(|q|^2 + 1e-6) / sqrt(dk); k = k / sqrt(|k|^2 + 1e-6)
 *   beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias)
 *   S = exp(g) S; delta = beta (v - k^T S); S += k delta^T; o = q^T S
 *   y = o / sqrt(mean(o^2) + eps) * norm_weight * silu(z)
 *
 * A sequence with few new rows (decode) takes the recurrent step, reading
 * its state for k^T S and q^T S in one pass and writing it in a second; a
 * longer one (prefill) takes the chunked WY/UT form, GDN_CHUNK tokens per
 * chunk, whose work is small matrix products (cpu_gated_deltanet.c).
 * Both carry the state across chunks and calls, so a prompt split over
 * several calls gives what one call gives (to float32 rounding).
 * float32 throughout; the inner loops have a portable version (the
 * reference) and AVX2+FMA ones, picked from cpu_isa_active() when the
 * module is created.
 */
#ifndef NANOVLLM_CPU_GATED_DELTANET_H
#define NANOVLLM_CPU_GATED_DELTANET_H

#include <stdbool.h>
#include <stddef.h>

#include "thread_pool.h"
#include "base/error.h"

typedef struct GdnShape {
    int num_k_heads, num_v_heads; /* Hk, Hv; Hv a multiple of Hk */
    int k_dim, v_dim;             /* dk, dv per head */
    int conv_kernel;              /* K >= 2 */
    float norm_eps;               /* rms_norm_eps of the gated output norm */
    bool value_heads_tiled;       /* value head v reads key head v % Hk, not v / (Hv / Hk) */
} GdnShape;

/* 2*Hk*dk + Hv*dv: the width of in_proj_qkv's rows (q, k, v in that order). */
size_t gdn_conv_dim(const GdnShape *s);

/* Floats of one sequence's conv state in one layer: (K-1) * conv_dim,
 * laid out [K-1][conv_dim], row r the projected (pre-conv) qkv row of the
 * token K-1-r positions before the next one: oldest first, zeros before
 * the sequence's start. */
size_t gdn_conv_state_floats(const GdnShape *s);

/* Floats of one sequence's recurrent state in one layer: Hv*dk*dv, laid
 * out [Hv][dk][dv] (value head j's S_j row-major, the key dim first). */
size_t gdn_recurrent_state_floats(const GdnShape *s);

/* One layer's weights, float32. */
typedef struct GdnLayerWeights {
    const float *conv_weight;     /* [conv_dim, K] (HF conv1d.weight [conv_dim,1,K] squeezed) */
    const float *A_log, *dt_bias; /* [Hv] */
    const float *norm_weight;     /* [dv], used as is (not 1 + w) */
} GdnLayerWeights;

typedef struct GdnSeq {
    int first_row, num_rows; /* this sequence's new tokens: rows [first_row, first_row+num_rows) */
    float *conv_state;       /* gdn_conv_state_floats(), layout above */
    float *recurrent_state;  /* gdn_recurrent_state_floats(), layout above */
    bool fresh;              /* a new sequence (position 0): both states are zeroed first */
} GdnSeq;

typedef struct CpuGdn CpuGdn;

/* For steps of up to max_rows rows in all; the kernels are those of
 * cpu_isa_active() now. NULL and err set on a bad shape or no memory. */
CpuGdn *cpu_gdn_create(ThreadPool *pool, const GdnShape *s, int max_rows, Error *err);
void cpu_gdn_destroy(CpuGdn *g);

/* qkv [rows, conv_dim] (in_proj_qkv's output; overwritten, as scratch),
 * z [rows, Hv*dv], a and b [rows, Hv] (in_proj_a / in_proj_b outputs),
 * out [rows, Hv*dv]: for each sequence its rows of out, ready for
 * out_proj; its states advanced past them. Sequences are independent and
 * their rows must not overlap; rows of no sequence are left alone. Runs on
 * the pool over (sequence, channel block) for the conv, then over
 * (sequence, value head) pairs. */
void cpu_gdn_forward(CpuGdn *g, const GdnLayerWeights *w, const GdnSeq *seqs, int num_seqs,
                     float *qkv, const float *z, const float *a, const float *b, float *out);

/* Sequences with fewer new rows than this take the recurrent step token by
 * token, others the chunked form (default GDN_CHUNK_MIN_ROWS). For tests
 * and benchmarks: 1 chunks everything, INT_MAX nothing. */
void cpu_gdn_set_chunk_min_rows(CpuGdn *g, int rows);

#endif
